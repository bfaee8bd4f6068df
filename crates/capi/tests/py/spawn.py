# Children writing to the owner's descriptions: children that glibc
# starts without the fork handlers and that exec at once (posix_spawn with
# a dup2 file action from a close-on-exec descriptor; system() and popen(),
# which spawn inside glibc, writing to a descriptor they inherit), and
# forked ones (subprocess.run moving a close-on-exec descriptor onto its
# output; a child that does not exec; a file used only at explicit
# offsets). Each child writes between two writes of the
# owner's to the same description, so the file shows whether the child
# had the descriptor at all and whether it shared the owner's offset. On
# the directory argv[1]; prints what it saw, for a diff against the same
# run on tmpfs.
import ctypes
import os
import sys

root = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.popen.restype = ctypes.c_void_p
libc.popen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.pclose.argtypes = [ctypes.c_void_p]
libc.fread.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]

out = os.path.join(root, "spawned")
# Python opens descriptors close-on-exec (PEP 446).
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"owner 1\n")

# 1. posix_spawn, the descriptor handed over by a dup2 action.
pid = os.posix_spawn("/bin/sh", ["sh", "-c", "echo spawned"], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, fd, 1)])
print("1 posix_spawn status", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
os.write(fd, b"owner 2\n")

# 2. system(), the descriptor inherited.
os.set_inheritable(fd, True)
print("2 system status", os.waitstatus_to_exitcode(libc.system(b"echo system >&%d" % fd)))
os.write(fd, b"owner 3\n")

# 3. popen(), the descriptor inherited, the pipe read back.
f = libc.popen(b"echo popen >&%d && echo piped" % fd, b"r")
buf = ctypes.create_string_buffer(64)
n = libc.fread(buf, 1, 64, f)
print("3 popen read", buf.raw[:n], "status", os.waitstatus_to_exitcode(libc.pclose(f)))
os.write(fd, b"owner 4\n")

# 4. A file the child opens by name in the pool, through posix_spawnp.
pid = os.posix_spawnp("sh", ["sh", "-c", "cat %s > %s.copy" % (out, out)], os.environ)
print("4 posix_spawnp status", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
os.close(fd)

with open(out, "rb") as f:
    print("file", f.read())
with open(out + ".copy", "rb") as f:
    print("copy", f.read())

# 5. subprocess.run with stdout (and stderr) on a close-on-exec descriptor:
# the forked child moves it onto 1 and execs.
sub = os.path.join(root, "subprocess")
import subprocess

with open(sub, "w") as f:
    subprocess.run(["echo", "first child"], stdout=f)
    f.write("owner a\n")
    f.flush()
    subprocess.run("echo shell; echo err >&2", shell=True, stdout=f, stderr=subprocess.STDOUT)
    f.write("owner b\n")

# 6. A forked child that does not exec writes to a close-on-exec
# descriptor between two writes of the owner's.
fd = os.open(sub + ".fork", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"owner 1\n")
pid = os.fork()
if pid == 0:
    os.write(fd, b"forked child\n")
    os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"owner 2\n")
os.close(fd)

# 7. A file used only at explicit offsets before the fork (a database's):
# the child's pwrite and the owner's pread meet in the file.
fd = os.open(sub + ".db", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.pwrite(fd, b"page0...", 0)
pid = os.fork()
if pid == 0:
    os.pwrite(fd, b"page1...", 8)
    os._exit(0)
os.waitpid(pid, 0)
print("7 pread", os.pread(fd, 16, 0))
os.close(fd)

for name in ("", ".fork"):
    with open(sub + name, "rb") as f:
        print("file", name, f.read())
