"""What the side-by-side benchmark scripts share: where NNI v2.0 and the Lithe build are, the
environment both sides run in, and one timed subprocess run."""
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORK = pathlib.Path(os.environ.get("LITHE_BENCH_DIR", ROOT / "build" / "bench"))
NNI = pathlib.Path(os.environ.get("LITHE_NNI_DIR", ROOT.parent / "shared" / "peers" / "nni-v2.0"))
LITHE = ROOT / "build" / "bin" / "lithe"


def ready():
    """None when both sides can run; else the exit code after saying why (0 without NNI: the
    scripts measure nothing rather than fail where the peer is not installed)."""
    if not (NNI / "nni").is_dir():
        print(f"NNI v2.0 not found at {NNI} (set LITHE_NNI_DIR): nothing measured")
        return 0
    if not LITHE.is_file():
        print(f"{LITHE} missing: build first (scripts/build.sh)", file=sys.stderr)
        return 1
    WORK.mkdir(parents=True, exist_ok=True)
    return None


def timed(command, nni=False):
    """Runs `command` (OpenBLAS at one thread; NNI's import path when `nni`); returns
    (wall seconds, stdout)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if nni:
        env.update(PYTHONPATH=f"{NNI}:{NNI / 'deps'}:{NNI / 'stubs'}", PYTHONHASHSEED="0")
    start = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, out
