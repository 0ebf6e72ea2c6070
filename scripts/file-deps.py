#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Which object file of a program uses a symbol another one defines.

Usage: file-deps.py OBJ...   (e.g. build/daemon/tensord.p/*.o)
       file-deps.py DIR      (every *.o in DIR: the suite's form)

Reads `nm` of each object: the symbols it defines (text, data, bss) and
the ones it leaves undefined. An edge a -> b means a uses something b
defines. Prints every edge, then each call cycle (a strongly connected
set of more than one file) and exits 1 when there is one, else 0.
Calls through a function pointer (a registered callback) are no edge:
that is how a lower file hands work back up without depending on it.
"""
import os
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defs, uses = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            uses.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRC":
            defs.add(parts[2])
    return defs, uses


def name(obj):
    base = os.path.basename(obj)
    return base[:-2] if base.endswith(".o") else base


def sccs(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main(objs):
    if len(objs) == 1 and os.path.isdir(objs[0]):
        objs = sorted(os.path.join(objs[0], f) for f in os.listdir(objs[0])
                      if f.endswith(".o"))
    if not objs:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    table = {name(o): symbols(o) for o in objs}
    owner = {}
    for f, (defs, _) in table.items():
        for s in defs:
            owner[s] = f
    edges = {f: set() for f in table}
    why = {}
    for f, (_, uses) in table.items():
        for s in sorted(uses):
            g = owner.get(s)
            if g and g != f:
                edges[f].add(g)
                why.setdefault((f, g), []).append(s)
    for f in sorted(edges):
        for g in sorted(edges[f]):
            print(f"{f} -> {g}: {' '.join(why[(f, g)])}")
    cycles = [c for c in sccs(table, edges) if len(c) > 1]
    for c in cycles:
        print("cycle:", " ".join(c))
    print(f"{len(table)} files, {sum(map(len, edges.values()))} edges, "
          f"{len(cycles)} cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
