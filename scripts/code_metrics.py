#!/usr/bin/env python3
"""Counts what the pipeline issue measures, over src/ (and tools/): the longest functions, the places
that plan or lower a spec, the files that read the environment, and the include arrows that point
up the stage order. Usage: scripts/code_metrics.py [--top N]"""
import os, re, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The stages from the bottom up: a file may include its own stage's headers and those below.
ORDER = ["support", "target", "ir", "sym", "spec", "fuse", "interp", "tile", "codegen", "runtime", "driver", "tools"]
SIG = re.compile(r"^(\s{0,4})(?!if\b|for\b|while\b|switch\b|return\b|else\b|do\b)[\w:<>,\s\*&~\[\]]+?\b(\w+|operator\S+)\s*\([^;{}]*\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>]+)?\s*\{\s*$")


def sources():
    for top in ("src", "tools"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "kernels" in d.split(os.sep):
                continue  # runtime headers pasted into generated code, not compiler code
            for f in files:
                if f.endswith((".cpp", ".h")):
                    yield os.path.join(d, f)


def functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        m = SIG.match(lines[i])
        if m:
            depth, j = 0, i
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                if depth <= 0:
                    break
                j += 1
            yield m.group(2), i + 1, j - i + 1
            i = j
        i += 1


def stage_of(path):
    rel = os.path.relpath(path, ROOT).split(os.sep)
    return "tools" if rel[0] == "tools" else rel[1]


def main():
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 10
    funcs, env, plan_sites, upward = [], [], [], []
    for p in sources():
        rel = os.path.relpath(p, ROOT)
        text = open(p, encoding="utf-8", errors="replace").read()
        for name, line, n in functions(p):
            funcs.append((n, f"{rel}:{line}", name))
        if "getenv(" in text:
            env.append(rel)
        for m in re.finditer(r"\b(make_plan|lower_plan|lower_without_passes)\(", text):
            line = text.count("\n", 0, m.start()) + 1
            decl = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.start())]
            if re.match(r"\s*(Plan|Module)\s+(make_plan|lower_plan|lower_without_passes)\(", decl) or decl.strip().startswith(("//", "*", "/*")):
                continue  # the definition or declaration itself, or a comment
            plan_sites.append(f"{rel}:{line} {m.group(1)}")
        s = stage_of(p)
        for inc in re.findall(r'#include "(\w+)/', text):
            if inc in ORDER and s in ORDER and ORDER.index(inc) > ORDER.index(s):
                upward.append(f"{rel} -> {inc}/")
    funcs.sort(reverse=True)
    print(f"longest functions (lines):")
    for n, where, name in funcs[:top]:
        print(f"  {n:4d}  {name}  {where}")
    print(f"functions over 80 lines: {sum(1 for f in funcs if f[0] > 80)}")
    print(f"calls that plan or lower ({len(plan_sites)}):")
    for s in plan_sites:
        print(f"  {s}")
    print(f"files reading the environment ({len(env)}): {', '.join(env)}")
    print(f"upward include arrows ({len(upward)}):")
    for u in upward:
        print(f"  {u}")


if __name__ == "__main__":
    main()
