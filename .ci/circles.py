#!/usr/bin/env python3
"""Import circles between files of each crate: resolves `crate::`, `super::`, `self::` paths
(in use lines and inline) to the deepest existing module file, following a module's `pub use`
of its own descendants to the file that defines the item, then prints every strongly connected
component of more than one file. A module declaring its children is not an arrow; test
modules (`#[cfg(test)] mod … {`) are left out.

Usage: `python3 .ci/circles.py [src dir ...]`; with no argument, every workspace member's
`src/`. `CIRCLES=-v` prints each circle's arrows. Exits 1 when it finds a circle."""
import os, re, sys
from collections import defaultdict

def modules(src):
    """module path tuple -> file"""
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'): continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel in (['lib'], ['main']): key = ()
            elif rel[-1] == 'mod': key = tuple(rel[:-1])
            else: key = tuple(rel)
            if rel[0] == 'bin': continue
            mods[key] = p
    return mods

PATH = re.compile(r'\b((?:crate|super|self)(?:::\{?[A-Za-z_][A-Za-z0-9_]*)+)')
def refs(text):
    # strip comments and strings roughly
    text = re.sub(r'//[^\n]*', '', text)
    out = []
    # expand use groups: `use crate::a::{b, c::d}` -> paths
    for m in re.finditer(r'\buse\s+((?:crate|super|self)::[^;]*);', text, re.S):
        out += expand(m.group(1).replace('\n', ' '))
    for m in PATH.finditer(text):
        out.append(m.group(1).replace('{', ''))
    return out

def expand(u):
    u = u.strip()
    i = u.find('{')
    if i < 0: return [u.split(' as ')[0].strip()]
    prefix = u[:i]
    inner = u[i+1:u.rfind('}')]
    parts, depth, cur = [], 0, ''
    for ch in inner:
        if ch == ',' and depth == 0: parts.append(cur); cur=''; continue
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        cur += ch
    parts.append(cur)
    res = []
    for p in parts:
        p = p.strip()
        if not p: continue
        if p == 'self': res.append(prefix.rstrip(':')); continue
        res += expand(prefix + p)
    return res

def reexports(text, key, mods):
    """name -> module file for the items a module re-exports from its own descendants
    (`pub use kinds::ActionKind;`, `pub use self::error::{AgentError, Result};`), so that
    `crate::agent::AgentError` is an arrow to `agent/error.rs`, not to `agent/mod.rs`."""
    out = {}
    for m in re.finditer(r'\bpub(?:\([^)]*\))?\s+use\s+([^;]*);', text, re.S):
        for u in expand(m.group(1).replace('\n', ' ')):
            alias = None
            if ' as ' in u:
                u, alias = [x.strip() for x in u.split(' as ', 1)]
            segs = u.split('::')
            if segs[0] == 'self': segs = segs[1:]
            if not segs or segs[0] in ('crate', 'super') or segs[-1] == '*': continue
            cur, best = key, None
            for s in segs[:-1]:
                cur = cur + (s,)
                if cur in mods: best = cur
                else: break
            if best is not None:
                out[alias or segs[-1]] = best
    return out

EXPORTS = {}

def resolve(path, here, mods):
    segs = path.split('::')
    if segs[0] == 'crate': base = (); segs = segs[1:]
    else:
        base = here
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super': base = base[:-1]
            segs = segs[1:]
    best = None
    cur = base
    if cur in mods: best = cur
    for i, s in enumerate(segs):
        cur = cur + (s,)
        if cur in mods: best = cur
        else:
            # an item the deepest module re-exports from a descendant: follow it (a chain
            # of re-exports is followed to its end)
            seen = set()
            while best is not None and s in EXPORTS.get(best, {}) and best not in seen:
                seen.add(best)
                best = EXPORTS[best][s]
            break
    return best

def scc(nodes, edges):
    index, low, stack, on, res = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)
    c = [0]
    def visit(v):
        index[v] = low[v] = c[0]; c[0] += 1; stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            res.append(comp)
    for v in nodes:
        if v not in index: visit(v)
    return res

def workspace_sources():
    """Every workspace member's `src/` (read from the root Cargo.toml's `members`)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    text = open(os.path.join(root, 'Cargo.toml')).read()
    members = re.search(r'members\s*=\s*\[([^\]]*)\]', text, re.S).group(1)
    dirs = [os.path.join(root, m, 'src') for m in re.findall(r'"([^"]+)"', members)]
    dirs = [os.path.normpath(d) for d in dirs if os.path.isdir(d)]
    if not dirs:
        sys.exit("circles.py: no workspace member has a src/ directory")
    return dirs

total = 0
sources = sys.argv[1:] or workspace_sources()
print(f"checking {len(sources)} crates: " + ', '.join(os.path.relpath(s) for s in sources))
for src in sources:
    mods = modules(src)
    edges = defaultdict(set)
    EXPORTS.clear()
    for key, p in mods.items():
        EXPORTS[key] = reexports(open(p).read(), key, mods)
    for key, p in mods.items():
        text = open(p).read()
        # drop #[cfg(test)] mod tests { ... } blocks: test code may import anything
        t = re.split(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', text)[0]
        for r in refs(t):
            tgt = resolve(r, key, mods)
            if tgt is None or tgt == key: continue
            # a parent declaring/re-exporting its children is not an arrow up; skip parent->child
            if tgt[:len(key)] == key: continue
            edges[key].add(tgt)
    comps = [c for c in scc(list(mods), edges) if len(c) > 1]
    for c in comps:
        total += 1
        print(f"{src}: circle of {len(c)}: " + ', '.join('::'.join(k) or 'lib' for k in sorted(c)))
        if '-v' in os.environ.get('CIRCLES', ''):
            cs = set(c)
            for a in sorted(c):
                for b in sorted(edges[a] & cs):
                    print(f"    {'::'.join(a)} -> {'::'.join(b)}")
print(f"{total} circles")
sys.exit(1 if total else 0)
