"""What tests/audio.sh and tests/vision.sh share: a tally of checks, the largest
differences seen, a comparison of our JSON with transformers.js's, and running the CLI for
JSON. Imported by their Python (run from the repository root)."""
import json, subprocess

class Checks:
    def __init__(self, tm):
        self.tm = tm
        self.passed = self.failed = self.skipped = 0
        self.worst = {}

    def ok(self, name, problem):
        """One check: passed when problem is None or empty, else printed as a failure."""
        if problem:
            self.failed += 1
            print(f'FAIL {name}: {problem}')
        else:
            self.passed += 1

    def note(self, what, value):
        self.worst[what] = max(self.worst.get(what, 0.0), value)

    def diff(self, want, got, what, path='$'):
        """The first difference (labels and texts exact, numbers within 1e-4), or None."""
        if isinstance(want, (int, float)) and isinstance(got, (int, float)) and not isinstance(got, bool):
            self.note(what, abs(want - got))
            return None if abs(want - got) <= 1e-4 else f'{path}: {got} != {want}'
        if type(want) != type(got):
            return f'{path}: {json.dumps(got)[:120]} is not a {type(want).__name__}'
        if isinstance(want, dict):
            if set(want) != set(got):
                return f'{path}: keys {sorted(got)} != {sorted(want)}'
            for k in want:
                d = self.diff(want[k], got[k], what, f'{path}.{k}')
                if d: return d
            return None
        if isinstance(want, list):
            if len(want) != len(got):
                return f'{path}: {len(got)} items != {len(want)}'
            for i, (w, g) in enumerate(zip(want, got)):
                d = self.diff(w, g, what, f'{path}[{i}]')
                if d: return d
            return None
        return None if want == got else f'{path}: {got!r} != {want!r}'

    def run_json(self, args):
        r = subprocess.run([self.tm] + args, capture_output=True, text=True)
        try:
            return r, json.loads(r.stdout)
        except ValueError:
            return r, None

    def summary(self):
        """Prints the largest differences and the tally; the exit status for sys.exit."""
        for what, v in self.worst.items():
            print(f'max |diff| {what}: {v:.3g}')
        print(f'{self.passed} passed, {self.failed} failed, {self.skipped} skipped')
        return 1 if self.failed else 0
