# Session 7 (H9): a Python emulation of the CUDA max/min backward in one read of x
# (src/cuda/segment_maxbwd.cuh): flat_maxmin_bwd's lane walks, warp scan and ballot
# hand-off, feat_maxmin_bwd's per-segment walk, fixup_tree's totals (long segments'
# carries clobbered as its phase 2 does) and maxmin_repair, against a direct
# reference on random 1-row layouts. Logic check only (no rounding, no GPU).
import random, math
NAN = float('nan')
def is_ext(x, y): return x != x or x == y
BIG = 2**31 - 1
def ident(tie): return 0 if tie == 0 else (BIG if tie == 1 else -1)
def comb(tie, a, b): return a + b if tie == 0 else (min(a, b) if tie == 1 else max(a, b))
def first_carry_tile(q, t, items): return 0 if t == 0 else (t - 1 + q[t]) // items
KSHORT = 32

def merge_search(ends, nseg, nel, d):
    lo, hi = max(0, d - nel), min(d, nseg)
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] <= d - mid - 1: lo = mid + 1
        else: hi = mid
    return lo, d - lo

def run(lens, x, g, y, tie, IPL, flat=True, FI=32):
    L = len(x); S = len(lens)
    off = [0]
    for n in lens: off.append(off[-1] + n)
    q = [0] + off + [L]; U = S + 2
    assert len(q) == U + 1
    items = 32 * IPL if flat else FI
    D = U + L
    W = (D + items - 1) // items
    q1 = q[1:]
    ti_ = []; tj_ = []
    for w in range(W + 1):
        d = min(w * items, D)
        i, j = merge_search(q1, U, L, d)
        ti_.append(i); tj_.append(j)
    def real(v):
        if v <= 0 or v >= U: return None
        s = v - 1
        if s == S: return None
        return s
    def sval(v, j):
        o = real(v)
        if o is None or not is_ext(x[j], y[o]): return ident(tie)
        return 1 if tie == 0 else j
    def elem(v, j, stat):
        o = real(v)
        if o is None: return 0.0
        if is_ext(x[j], y[o]):
            if tie == 0: return g[o] / stat
            return g[o] if j == stat else 0.0
        return 0.0
    gi = [None] * L
    carry = [None] * W; head = [None] * W; keep = [None] * W
    def keep_carry(t): return t < U and first_carry_tile(q, t + 1, items) - first_carry_tile(q, t, items) > KSHORT
    for w in range(W):
        i0, j0, i1, j1 = ti_[w], tj_[w], ti_[w + 1], tj_[w + 1]
        ns, ne = i1 - i0, j1 - j0
        if flat:
            s_e = [q[i0 + k + 1] - j0 for k in range(ns)]
            tot = ns + ne
            lanes = []
            for lane in range(32):
                ld0 = min(lane * IPL, tot); ld1 = min(ld0 + IPL, tot)
                ti, tj = merge_search(s_e, ns, ne, ld0)
                lanes.append([ti, tj, ld1 - ld0])
            st = []
            for lane in range(32):
                ti, tj, it = lanes[lane]
                ti0 = ti
                acc = ident(tie); first = acc; df = False
                while it > 0:
                    e = s_e[ti] if ti < ns else ne
                    r = min(e - tj, it)
                    for k in range(r): acc = comb(tie, acc, sval(i0 + ti, j0 + tj + k))
                    tj += r; it -= r
                    if it > 0:
                        if not df: first = acc; df = True
                        acc = ident(tie); ti += 1; it -= 1
                st.append(dict(ti0=ti0, ti_last=ti, key=i0 + ti, val=acc, first=first, df=df))
            # inclusive segmented scan
            vals = [s['val'] for s in st]; keys = [s['key'] for s in st]
            off_ = 1
            while off_ < 32:
                nv = vals[:]
                for lane in range(32):
                    if lane >= off_ and keys[lane - off_] == keys[lane]: nv[lane] = comb(tie, vals[lane - off_], vals[lane])
                vals = nv; off_ *= 2
            ht = []
            for lane in range(32):
                s = st[lane]
                kin = keys[lane - 1] if lane > 0 else -1
                vin = vals[lane - 1] if lane > 0 else None
                h = ident(tie)
                if s['df']:
                    v = i0 + s['ti0']
                    h = comb(tie, vin, s['first']) if kin == v else s['first']
                    if v == i0 and q[i0] < j0: head[w] = h
                ht.append(h)
            for lane in range(32):
                s = st[lane]
                later = [l for l in range(lane + 1, 32) if st[l]['df']]
                tail = ht[later[0]] if later else vals[31]
                s['head_total'] = ht[lane] if s['df'] else tail
                s['tail_total'] = tail
            carry[w] = vals[31]
            if keep_carry(i1): keep[w] = vals[31]
            for lane in range(32):
                ti, tj, it = lanes[lane]; s = st[lane]
                while it > 0:
                    e = s_e[ti] if ti < ns else ne
                    r = min(e - tj, it)
                    if ti == s['ti0']: stat = s['head_total']
                    elif ti == s['ti_last']: stat = s['tail_total']
                    else:
                        stat = ident(tie)
                        for k in range(r): stat = comb(tie, stat, sval(i0 + ti, j0 + tj + k))
                    for k in range(r):
                        j = j0 + tj + k
                        assert gi[j] is None
                        gi[j] = elem(i0 + ti, j, stat)
                    tj += r; it -= r
                    if it > 0: ti += 1; it -= 1
        else:
            crossing0 = q[i0] < j0
            j = j0; i = i0
            while True:
                e = q[i + 1] if i < i1 else j1
                jb = j; acc = ident(tie)
                while j < e: acc = comb(tie, acc, sval(i, j)); j += 1
                if i == i1:
                    carry[w] = acc
                    if keep_carry(i1): keep[w] = acc
                elif i == i0 and crossing0: head[w] = acc
                for jj in range(jb, e):
                    assert gi[jj] is None
                    gi[jj] = elem(i, jj, acc)
                if i == i1: break
                i += 1
    # fixup: totals of crossing segments (tile w where t = tile_i[w] completes and began earlier)
    stats = {}
    for w in range(W):
        t = ti_[w]
        if not (ti_[w + 1] > t and q[t] < tj_[w]): continue
        w0 = first_carry_tile(q, t, items)
        acc = ident(tie)
        for p in range(w0, w): acc = comb(tie, acc, carry[p])
        acc = comb(tie, acc, head[w])
        if real(t) is not None: stats[real(t)] = acc
        if w - w0 > KSHORT:
            for p in range(w0, w): carry[p] = 'CLOBBERED'  # fixup_tree phase 2
    # repair
    for w in range(W):
        i0, j0, i1, j1 = ti_[w], tj_[w], ti_[w + 1], tj_[w + 1]
        def fix(t, r, jb, je):
            if r == ident(tie): return
            o = real(t)
            if o is None: return
            R = stats[o]
            if r == R: return
            if tie == 0:
                for jj in range(jb, je):
                    if is_ext(x[jj], y[o]): gi[jj] = elem(t, jj, R)
            else:
                gi[r] = elem(t, r, R)
        if i1 > i0 and q[i0] < j0: fix(i0, head[w], j0, q[i0 + 1])
        if i1 < U:
            rec = keep[w] if keep_carry(i1) else carry[w]
            assert rec != 'CLOBBERED' and rec is not None, (w, i1)
            fix(i1, rec, max(q[i1], j0), j1)
    return gi

def reference(lens, x, g, y, tie):
    gi = [0.0] * len(x); p = 0
    for s, n in enumerate(lens):
        idx = [j for j in range(p, p + n) if is_ext(x[j], y[s])]
        for j in idx:
            if tie == 0: gi[j] = g[s] / len(idx)
            elif tie == 1: gi[j] = g[s] if j == idx[0] else 0.0
            else: gi[j] = g[s] if j == idx[-1] else 0.0
        p += n
    return gi

def segmax(lens, x, mx):
    y = []; p = 0
    for n in lens:
        seg = x[p:p + n]; p += n
        if any(v != v for v in seg): y.append(NAN)
        elif not seg: y.append(-math.inf if mx else math.inf)
        else: y.append(max(seg) if mx else min(seg))
    return y

random.seed(1)
bad = 0; cases = 0
for it in range(400):
    IPL = random.choice([1, 2, 4])
    flat = random.random() < 0.6
    FI = random.choice([4, 8, 32])
    items = 32 * IPL if flat else FI
    kind = random.random()
    lens = []
    L = random.randint(1, 60 * items)
    left = L
    while left > 0:
        r = random.random()
        n = random.randint(0, 3) if r < 0.4 else (random.randint(0, 3 * items) if r < 0.8 else random.randint(0, 45 * items))
        n = min(n, left); lens.append(n); left -= n
    for _ in range(random.randint(0, 3)): lens.insert(random.randint(0, len(lens)), 0)
    card = random.choice([1, 2, 3, 50])
    x = [float(random.randint(0, card - 1)) if random.random() > 0.01 else NAN for _ in range(L)]
    mx = random.random() < 0.5
    y = segmax(lens, x, mx)
    g = [random.choice([-1.0, 0.0, 1.0, 2.5]) for _ in lens]
    for tie in (0, 1, 2):
        cases += 1
        got = run(lens, x, g, y, tie, IPL, flat, FI)
        ref = reference(lens, x, g, y, tie)
        if any(a != b and not (a != a and b != b) for a, b in zip(got, ref)):
            bad += 1
            if bad < 5: print("MISMATCH", flat, IPL, FI, tie, lens[:10], [i for i, (a, b) in enumerate(zip(got, ref)) if a != b][:10])
print("cases", cases, "bad", bad)
