"""What the binding's tests share: where the repository, the build and the CLI are."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("TM_BUILD", os.path.join(ROOT, "build"))
TM = os.environ.get("TM", os.path.join(BUILD, "transmuter"))
DATA = os.path.join(ROOT, "tests", "data")


def cli(*args, check=True):
    """Runs the CLI; returns the completed process (stdout and stderr as text)."""
    r = subprocess.run([TM] + [str(a) for a in args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"transmuter {' '.join(map(str, args))}: {r.stderr.strip()}")
    return r
