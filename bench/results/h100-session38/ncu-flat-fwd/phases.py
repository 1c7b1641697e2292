# Phase table of the ncu-src SASS CSV (session 38). Usage: xz -dk ncu-src-sass.csv.xz &&
# tools/ncu-sass-summary ncu-src-sass.csv --split /tmp/ncu38split && python3 phases.py
# Line ranges are SASS line indices of this build (64a877c, sm_90, nvcc 13.0) only.
import csv,glob,collections
def load(pat):
    rows=list(csv.reader(open(sorted(glob.glob(pat))[0]))); return rows[0], rows[1:]
phases = {
 'fp32': (135176, '/tmp/ncu38split/0-*.csv', [
   (0,32,'prologue + tile_j[w], tile_j[w+1] (first use l.24)'),
   (33,73,'x loads issued (16 x LDG.32 a lane)'),
   (74,93,'tile_i loads + x staged to smem (STS waits on x)'),
   (94,248,'ends: ns, q loads -> s_e (first use l.118)'),
   (249,288,'fuse_open (q[i1] loads predicated off) + spill'),
   (289,310,'lane split: merge-path search in s_e'),
   (311,344,'lane ends mask (loop over its ends)'),
   (345,1386,'walk (16 items, branch-free FSEL/FADD)'),
   (1387,1425,'warp segmented scan (5 SHFL pairs)'),
   (1426,1530,'first/head: q[i0] load (l.1436), finish STG, head STG'),
   (1531,99999,'carry STG (lane 31) + exit'),
 ]),
 'bf16': (67592, '/tmp/ncu38split/1-*.csv', [
   (0,67,'prologue + tile_i/tile_j[w], [w+1] (first use l.22)'),
   (68,486,'full-tile / per-vector x paths (rare)'),
   (487,495,'x loads issued (5 x LDG.128 a lane)'),
   (496,684,'s_m[lane]=0 (+ many-ends branch, unused)'),
   (685,708,'ends: q[i0+1+lane] load (first use l.695), s_e, ATOMS.OR'),
   (709,771,'popc + count scan (5 SHFL) + lane remat + mask spill reload'),
   (772,1719,'walk (32 positions: unpack, FADD, masked STS)'),
   (1720,1769,'fuse_open + q[i0] head load (first use l.1745)'),
   (1770,1831,'warp segmented scan + join of earlier lanes'),
   (1832,2397,'finish loop: s_val lookups, output STG.U16'),
   (2398,99999,'carry/head STG + exit'),
 ])}
for k,(W,pat,ph) in phases.items():
    h,rows=load(pat)
    sc=[i for i in range(4,len(h))]
    tot_e=sum(float(r[2]) for r in rows); tot_s=sum(float(r[3]) for r in rows)
    print(f"\n### {k}: {tot_e/W:.0f} warp instructions a warp (tile), {tot_s:.0f} stall samples\n")
    print("| lines | phase | instr/tile | samples | % samples | top stalls |\n|---|---|---|---|---|---|")
    for a,b,name in ph:
        sel=[r for r in rows if a<=int(r[0])<=b]
        e=sum(float(r[2]) for r in sel)/W; s=sum(float(r[3]) for r in sel)
        st=collections.Counter()
        for r in sel:
            for i in sc: st[h[i][6:]]+=float(r[i])
        tops=', '.join(f"{n} {v:.0f}" for n,v in st.most_common(3) if v>0)
        print(f"| {a}-{b if b<99999 else 'end'} | {name} | {e:.0f} | {s:.0f} | {100*s/tot_s:.1f} | {tops} |")
    st=collections.Counter()
    for r in rows:
        for i in sc: st[h[i][6:]]+=float(r[i])
    print("\nstall reasons (all samples): "+', '.join(f"{n} {v:.0f} ({100*v/tot_s:.1f}%)" for n,v in st.most_common(8)))
