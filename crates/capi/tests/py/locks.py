"""Lock semantics a program relies on: flock and OFD locks conflict between
open file descriptions, POSIX locks of one process never conflict with each
other, and another process sees all of them. Run on tmpfs and under the
preload library (the child processes then reach the pool through the
owner's mount): the two outputs must be equal."""
import fcntl, os, subprocess, sys, struct
d = sys.argv[1]
p = d + "/lockfile"
with open(p, "w") as f: f.write("x" * 100)
a = open(p, "r+"); b = open(p, "r+")
# flock between two descriptions of one process: they conflict
fcntl.flock(a, fcntl.LOCK_EX)
try:
    fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB); print("flock second description: granted")
except BlockingIOError: print("flock second description: EWOULDBLOCK")
# another process sees the flock
r = subprocess.run([sys.executable, "-c", "import fcntl,sys\nf=open(sys.argv[1],'r+')\ntry:\n  fcntl.flock(f, fcntl.LOCK_EX|fcntl.LOCK_NB); print('child flock: granted')\nexcept BlockingIOError: print('child flock: EWOULDBLOCK')", p], capture_output=True, text=True)
print(r.stdout.strip(), r.stderr.strip()[-200:])
fcntl.flock(a, fcntl.LOCK_UN)
fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB); print("flock after unlock: granted"); fcntl.flock(b, fcntl.LOCK_UN)
# POSIX locks: same process never conflicts; another process does
fcntl.lockf(a, fcntl.LOCK_EX, 10, 0)
fcntl.lockf(b, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0); print("posix same process: granted")
r = subprocess.run([sys.executable, "-c", "import fcntl,sys\nf=open(sys.argv[1],'r+')\ntry:\n  fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB, 10, 0); print('child posix: granted')\nexcept OSError as e: print('child posix:', e.errno)", p], capture_output=True, text=True)
print(r.stdout.strip(), r.stderr.strip()[-200:])
fcntl.lockf(a, fcntl.LOCK_UN, 10, 0)
# OFD locks: two descriptions of one process conflict, and a child sees them
F_OFD_SETLK = 37
fl = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 10, 0)
c = os.open(p, os.O_RDWR)
e = os.open(p, os.O_RDWR)
fcntl.fcntl(c, F_OFD_SETLK, fl)
try:
    fcntl.fcntl(e, F_OFD_SETLK, fl); print("ofd second description: granted")
except OSError as err: print("ofd second description:", err.errno)
r = subprocess.run([sys.executable, "-c", "import fcntl,sys\nf=open(sys.argv[1],'r+')\ntry:\n  fcntl.lockf(f, fcntl.LOCK_EX|fcntl.LOCK_NB, 10, 0); print('child posix vs ofd: granted')\nexcept OSError as e: print('child posix vs ofd:', e.errno)", p], capture_output=True, text=True)
print(r.stdout.strip(), r.stderr.strip()[-200:])
os.close(c)
fcntl.fcntl(e, F_OFD_SETLK, fl); print("ofd after the holder closed: granted")
