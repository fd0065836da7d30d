"""Deliberate breaks of the source: each must turn the default suite red.

Runs on a throwaway git worktree of HEAD, one mutant at a time, and prints CAUGHT or
MISSED per mutant. A MISSED line is a gap in the tests.

    .venv/bin/python scripts/mutation_check.py ["mutant name" ...]
"""
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
MUTANTS = {
  "verifier: output order": ("src/graphport/passes/verifier.py", "    if okinds != sorted(okinds):\n", "    if False:\n"),
  "verifier: get_attr ban": ("src/graphport/passes/verifier.py", '        if node.op == "get_attr":\n', '        if False:\n'),
  "verifier: output count": ("src/graphport/passes/verifier.py", "    if len(out_values) != len(sig.output_specs):\n", "    if False:\n"),
  "verifier: users in graph": ("src/graphport/passes/verifier.py", "        if strangers:\n", "        if False:\n"),
  "guard_size_oblivious answers False unguarded": ("src/graphport/shapes/node.py", '        found = self._static(decides=True)\n        return self.guard_bool() if found is None else found\n', '        return False\n'),
  "buffers_to_mutate empty": ("src/graphport/signature.py", "        return {s.arg.name: s.target for s in self.output_specs if s.kind is OutputKind.BUFFER_MUTATION}", "        return {}"),
  "meta cache ignores strides": ("src/graphport/capture/meta_cache.py", "tuple(_size_key(s) for s in t.stride()),", "(),"),
  "dead code removes user calls": ("src/graphport/passes/dead_code.py", "and node not in user_calls \\", "\\"),
  "random ops are pure": ("src/graphport/ops/kinds.py", "                or torch.Tag.nondeterministic_seeded in target.tags)", "                )"),
  "small sizes trusted without proof": ("src/graphport/passes/small_sizes.py", "        if a is not None and b is not None and _same_call(a, b, match, pins):", "        if a is not None and b is not None:"),
  "environment leaves flags set": ("src/graphport/capture/environment.py", "        _torch.set_compiler_flags(*saved)", "        pass"),
  "model attributes not restored": ("src/graphport/capture/__init__.py", "            stack.callback(snapshot.restore)", "            pass"),
}



def main(targets: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(root), "HEAD"], cwd=REPO, check=True)
        try:
            for name in targets:
                print(f"{run(root, name)}  {name}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(root)], cwd=REPO, check=True)


def run(root: pathlib.Path, name: str) -> str:
    path, old, new = MUTANTS[name]
    f = root / path
    text = f.read_text()
    assert old in text, f"mutant {name!r} no longer applies to {path}"
    f.write_text(text.replace(old, new, 1))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "2", "-p", "no:cacheprovider", "tests",
                            "--ignore", "tests/ops"], cwd=root, capture_output=True, text=True,
                           env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"}, timeout=900)
        return "CAUGHT" if r.returncode else "MISSED"
    finally:
        f.write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:] or list(MUTANTS))
