"""pytest setup for the Python tests: torch.compile's on-disk caches in a directory of this run.

A warm cache from an earlier process can hold a compiled backward that calls a Kernel's custom op
before this process has made it (docs/python.md, *Autograd*, open); the tests check redfuse, not
the machine's cache, so each run starts with an empty one, removed at exit.
"""
import atexit
import os
import shutil
import tempfile

if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="redfuse-tests-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
