import json, os, sys, statistics
HERE = os.path.dirname(os.path.abspath(__file__))
# Ratio table of docs/BENCHMARKS.md, issue 10: per-run medians of per-round ratios to tmpfs.
def load(path):
    j=json.load(open(path))
    thr={}; amp={}
    for w in j['workloads']:
        for m in w['metrics']:
            if m['key']=='ops_per_s':
                thr[w['name']]={t:v['rounds'] for t,v in m['targets'].items()}
    for w in j.get('accounting',[]) if isinstance(j.get('accounting'),list) else []:
        pass
    return j,thr
def med(x): return statistics.median(x)
olds=[load(os.path.join(HERE, f'results-old{i}.json'))[1] for i in (1,2)]
news=[load(os.path.join(HERE, f'results-new{i}.json'))[1] for i in (1,2)]
names=list(news[0].keys())
print("| workload | old strict / tmpfs | new strict / tmpfs | new fsync-atomic / tmpfs | new strict vs old strict | fsync-atomic vs old strict | fsync-atomic vs new strict | fsync-atomic / ext4 data=journal |")
print("|---|---|---|---|---|---|---|---|")
for n in names:
    o=[med([a/b for a,b in zip(r[n]['ferrite'],r[n]['tmpfs'])]) for r in olds if n in r]
    s=[med([a/b for a,b in zip(r[n]['ferrite'],r[n]['tmpfs'])]) for r in news]
    a=[med([a/b for a,b in zip(r[n]['ferrite-atomic'],r[n]['tmpfs'])]) for r in news]
    aj=[med([a/b for a,b in zip(r[n]['ferrite-atomic'],r[n]['ext4-journal'])]) for r in news]
    f=lambda xs: ", ".join(f"{x:.2f}×" for x in xs)
    mo=med(o) if o else float('nan')
    print(f"| {n} | {f(o)} | {f(s)} | {f(a)} | {med(s)/mo:.2f}× | {med(a)/mo:.2f}× | {med(a)/med(s):.2f}× | {f(aj)} |")
