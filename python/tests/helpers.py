"""What several test files share: the sizes a spec declares, and calls made from two threads."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Sequence


def spec_sizes(text: str) -> Dict[str, int]:
    """The default of every `size N = V` the spec's text declares."""
    sizes = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("size "):
            for item in line[5:].split(","):
                if "=" in item:
                    n, v = item.split("=")
                    sizes[n.strip()] = int(v)
    return sizes


def in_two_threads(f: Callable[[Any], Any], items: Sequence[Any]) -> List[Any]:
    """f of every item, the items split between two threads running at once."""
    results: List[Any] = [None] * len(items)

    def work(t: int) -> None:
        for i in range(t, len(items), 2):
            results[i] = f(items[i])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
