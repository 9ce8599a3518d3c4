"""Every command the docs show in a code block runs as shown (issue 58): the shell lines of README.md and
docs/*.md (```bash / ```sh / ```console blocks, and plain ``` blocks whose lines start with a command) and
every SQL statement of their ```sql blocks.

Each `soco ...` line runs through the console script in a fresh process, each SQL statement through
`soco sql` in a fresh process, against one small storage for the module: the first hour's settings
(docs/first-hour.md: two categories, four images each, its own storage, instance and spec folders) with the
families at their smallest configs (tests/tiny_families.py), built by the README's first `soco run` (every
family) and an LVLM spec answered by the loopback server (lvlm/loopback.py). One test per command
(per ```sql block: its statements), in the docs' order; a command that reads what an earlier line wrote
runs that line first (BEFORE), so each test passes alone.

A command that is not run here is in NOT_RUN with the reason and the test that covers it; a doc that gains a
command that is neither run nor listed fails `test_every_command_is_run_here_or_listed`, and so does a
listed command that no doc shows any more. The docs' placeholders (`my_lite0_320.yaml`, the first hour's
/tmp folder, `storage/...`) are substituted by `placeholders`."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from soco_pipeline.storage import PROJECT_ROOT
from tests.dagster_server import VENV_BIN, write_instance_yaml
from tests.faults import child_env
from tests.tiny_families import tiny_family_env

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(2400)]

DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
# a line of a plain ``` block is a command when its first word is one of these (else it is output or a tree)
PROGRAMS = {"make", "soco", "python", "dagster", "dg", "cp", "export", "source", "duckdb", "pip", "uv"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")

# Commands the docs show that this test does not run, and why. Keys are the command as shown (its comment
# cut, continuation lines joined).
NOT_RUN: dict[str, str] = {
    # the suite, the demo and the UI: CI runs `make test` (.ci/run); test_demo.py runs the demo's loop and
    # tests/core.py its stages; test_ui.py starts `dagster dev` on the instance `make ui` serves
    "make demo": "minutes on the full embedded set; test_demo.py runs the demo's run loop, CI the suite",
    "make test": "the whole suite, this test included: CI's own command (.ci/run)",
    "make test-fast": "the unit tier of this suite (`pytest -m unit`)",
    "make ui": "a server that runs until Ctrl-C; test_ui.py starts `dagster dev` and drives it",
    # the local distributed stack (Redis, Postgres, SeaweedFS, Celery): tests/test_scaleout.py (stack tier)
    "make cluster-up": "the distributed stack; test_scaleout.py starts and stops it",
    "source storage/cluster/cluster.env": "the cluster's settings, written by `make cluster-up`; test_scaleout.py",
    ".venv/bin/soco cluster status --dir storage/cluster": "needs the running stack; test_scaleout.py",
    ".venv/bin/dagster job backfill -j evaluate_backbone --all -w storage/cluster/workspace.yaml --noprompt": (
        "a backfill on the running stack; test_scaleout.py"
    ),
    "make cluster-down": "the distributed stack; test_scaleout.py",
    # a lab's Slurm cluster (docs/scaling-out.md): the local single-node Slurm's start, status and stop run in
    # tests/test_slurm.py through the console script, in a folder of their own (stack tier: root, slurm-wlm)
    "export SOCO_LAUNCHER=slurm SOCO_STORAGE=/shared/soco/storage DAGSTER_HOME=$HOME/soco_dagster "
    'SOCO_SLURM_OPTIONS="--partition=gpu --gres=gpu:1 --time=4:00:00"': (
        "a lab login node's settings (a shared filesystem path); test_slurm.py runs the Slurm launcher"
    ),
    ".venv/bin/dagster dev -h 0.0.0.0 -p 3000": "a server that runs until Ctrl-C; test_ui.py drives `dagster dev`",
    ".venv/bin/soco cluster start --engine slurm --dir storage/slurm": "test_slurm.py (stack tier) runs it",
    "source storage/slurm/slurm.env && make ui": "a server that runs until Ctrl-C; test_slurm.py, test_ui.py",
    ".venv/bin/soco cluster status --dir storage/slurm": "needs the local Slurm running; test_slurm.py runs it",
    ".venv/bin/soco cluster stop --dir storage/slurm": "needs the local Slurm running; test_slurm.py runs it",
    ".venv/bin/dagster-daemon run -w workspace.yaml &": (
        "a lab login node's daemon (a service); test_slurm.py starts dagster-daemon on its own workspace"
    ),
    ".venv/bin/dagster job backfill -j evaluate_backbone --partitions oracle_part,oracle_concept "
    "-w workspace.yaml --noprompt": (
        "needs the login node's daemon and Slurm; test_slurm.py queues this backfill for its daemon"
    ),
    "export SOCO_LAUNCHER=kubernetes SOCO_K8S_IMAGE=ghcr.io/lab/soco:2026-12 SOCO_K8S_NAMESPACE=soco        "
    "SOCO_K8S_GPUS=1 SOCO_K8S_VOLUME_CLAIM=soco-launch SOCO_LAUNCH_DIR=/launch SOCO_STORAGE=s3://lab-bucket/soco": (
        "no Kubernetes cluster here; test_launchers.py validates the rendered pod spec"
    ),
    ".venv/bin/soco run ckpt_010.yaml ckpt_020.yaml ckpt_030.yaml": (
        "a lab's checkpoint files; test_soco_run.py runs several specs in one `soco run` through the console "
        "script (both added, a run per model, the boards once, all cached again, a bad one adds none)"
    ),
    # pretrained weights, API keys or files this machine does not have
    ".venv/bin/soco add-backbone assets/backbone_presets/dinov2_vitb14.yaml": (
        "DINOv2-B/14's weights are not in the offline Hugging Face cache here (the command then exits 2 "
        "naming `huggingface-cli download`); test_add_backbone.py adds specs whose weights are here"
    ),
    ".venv/bin/python -m soco_pipeline.lvlm run assets/lvlm_presets/gpt4o.yaml --items "
    "storage/soco_lvlm_items.parquet": (
        "OpenAI's API (a key and the network); test_lvlm_openai.py runs the harness against a local server"
    ),
    ".venv/bin/python -m soco_pipeline.lvlm score outputs/*/*/*_soco_lvlm_img_c.xlsx": (
        "workbooks a VLMEvalKit run writes elsewhere; test_lvlm_vlmevalkit.py scores such workbooks"
    ),
}

# A command shown failing on purpose: its exit code and a piece of what it prints.
EXPECTED_FAILURE: dict[str, tuple[int, str]] = {
    ".venv/bin/soco run efficientnet_lite3": (
        2,
        "did you mean assets/backbone_presets/efficientnet_lite2.yaml",
    ),
}


@dataclass(frozen=True)
class Command:
    """One command (or SQL statement) a doc shows: where, and its text as shown (comment cut)."""

    where: str
    text: str
    sql: bool = False


def _doc_name(path: Path) -> str:
    return str(path.relative_to(PROJECT_ROOT))


def fenced_blocks(path: Path) -> list[tuple[int, str, list[str]]]:
    """(first line number, language, lines) of every fenced code block of a Markdown file, indent removed."""
    blocks, current = [], None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if current is None and m:
            current = (number, m.group(3).lower(), len(m.group(1)), m.group(2), [])
        elif current is not None and line.strip() == current[3]:
            blocks.append((current[0], current[1], current[4]))
            current = None
        elif current is not None:
            indent = current[2]
            current[4].append(line[indent:] if line[:indent].strip() == "" else line)
    if current is not None:
        raise AssertionError(f"{_doc_name(path)}:{current[0]}: a code block is never closed")
    return blocks


def cut_comment(line: str) -> str:
    """`line` without its shell comment (a `#` after whitespace, outside quotes), right-stripped."""
    quote = None
    for k, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
    return line.rstrip()


def _joined(lines: list[str]) -> list[tuple[int, str]]:
    """(offset, line) with backslash continuations joined into their first line."""
    out, pending, start = [], "", 0
    for k, line in enumerate(lines):
        if not pending:
            start = k
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        out.append((start, pending + line.strip() if pending else line))
        pending = ""
    return out


def program(text: str) -> str:
    """The command's program, without a `.venv/bin/` prefix."""
    first = text.split()[0] if text.split() else ""
    return first.removeprefix(".venv/bin/")


def soco_subcommands() -> set[str]:
    """The `soco` console script's subcommands (the `{sql,leaderboard,...}` of its usage line)."""
    from soco_pipeline.cli.soco import build_parser

    usage = " ".join(build_parser().format_usage().split())
    return set(re.search(r"\{([a-z,-]+)\}", usage).group(1).split(","))


def is_command(text: str) -> bool:
    """Whether a line of a plain block is a command: its first word is a program the docs run (`soco` followed
    by one of its subcommands: "soco board" is the title line of an output)."""
    words = text.split()
    if program(text) == "soco":
        return len(words) > 1 and words[1] in SOCO_SUBCOMMANDS
    return program(text) in PROGRAMS


def shell_commands(path: Path, number: int, language: str, lines: list[str]) -> list[Command]:
    """The commands of one block: every line of a shell block (a console block's `$ ` lines), and the lines of
    a plain block whose first word is a program the docs run."""
    out = []
    for offset, line in _joined(lines):
        text = line.strip()
        if language == "console":
            if not text.startswith("$ "):
                continue
            text = text[2:]
        text = cut_comment(text).strip()
        if not text:
            continue
        if language == "" and not is_command(text):
            continue
        out.append(Command(f"{_doc_name(path)}:{number + 1 + offset}", text))
    return out


def sql_statements(path: Path, number: int, lines: list[str]) -> list[Command]:
    """The statements of a ```sql block (`--` comments dropped), one per `;`."""
    body = "\n".join(re.sub(r"--.*$", "", line) for line in lines)
    statements = [" ".join(s.split()) for s in body.split(";")]
    return [Command(f"{_doc_name(path)}:{number}", s, sql=True) for s in statements if s]


def doc_blocks() -> dict[str, list[Command]]:
    """{"docs/x.md:LINE": its commands} for every code block that shows a command or a SQL statement."""
    out = {}
    for path in DOCS:
        for number, language, lines in fenced_blocks(path):
            if language == "sql":
                found = sql_statements(path, number, lines)
            elif language in SHELL or language == "":
                found = shell_commands(path, number, language, lines)
            else:
                continue
            if found:
                out[f"{_doc_name(path)}:{number}"] = found
    return out


SOCO_SUBCOMMANDS = soco_subcommands()
BLOCKS = doc_blocks()
RUNNABLE = {"soco", "python", "cp", "export", "duckdb"}  # what run_command knows how to run here
# what an interactive command reads on its standard input here (the duckdb CLI's shell: a query of the table
# whose nanosecond timestamps once kept the CLI from opening the file)
STDIN = {"duckdb": "select model, family, materialized_at from model_headlines;\n"}


def runs_here(command: Command) -> bool:
    """Whether the test runs this command (else it must be in NOT_RUN)."""
    if command.sql:
        return True
    if command.text in NOT_RUN or program(command.text) not in RUNNABLE:
        return False
    return program(command.text) != "python" or " -m soco_pipeline" in command.text


def test_every_command_is_run_here_or_listed():
    """The docs show commands; each runs here or is in NOT_RUN with a reason, and NOT_RUN names only commands
    a doc still shows. A `python` line runs here only as `python -m soco_pipeline...`."""
    commands = [c for block in BLOCKS.values() for c in block]
    assert any(c.sql for c in commands) and any(program(c.text) == "soco" for c in commands)
    unlisted = [f"{c.where}: {c.text}" for c in commands if not runs_here(c) and c.text not in NOT_RUN]
    assert not unlisted, "commands the docs show that are neither run here nor in NOT_RUN:\n" + "\n".join(
        unlisted
    )
    shown = {c.text for c in commands}
    stale = [text for text in (*NOT_RUN, *EXPECTED_FAILURE) if text not in shown]
    assert not stale, f"NOT_RUN / EXPECTED_FAILURE name commands no doc shows any more: {stale}"


@dataclass
class Docs:
    """The module's storage and what the docs' placeholders stand for."""

    root: Path
    env: dict[str, str]

    @property
    def storage(self) -> Path:
        return self.root / "storage"


FIRST_HOUR_ROOT = "/tmp/first-hour"  # the folder docs/first-hour.md's run used


def placeholders(docs: Docs) -> list[tuple[str, str]]:
    """(as the docs show it, what it stands for here), applied in order."""
    embedded = sorted((docs.storage / "embedded").glob("demo-seed0*"))
    return [
        (FIRST_HOUR_ROOT, str(docs.root)),
        # docs/first-hour.md's own checkpoint and LVLM spec: the files the fixture writes
        ("my_lite0_320.yaml", str(docs.root / "my_lite0_320.yaml")),
        ("my_vlm.yaml", str(docs.root / "my_vlm.yaml")),
        # the default demo's embedded folder: the first hour's settings give it a suffix
        ("storage/embedded/demo-seed0", str(embedded[0]) if embedded else "storage/embedded/demo-seed0"),
        # the official SOCO-LVLM TSVs: our own export, under the official names (see OFFICIAL_TSVS)
        *((name, str(docs.root / "official" / name)) for name in OFFICIAL_TSVS),
        # a preset copied into the LVLM folder: a folder of its own, so that no later run meets a model
        # whose server is not here
        ("assets/lvlms/", str(docs.root / "copied_lvlms") + "/"),
        ("$PWD/storage", str(docs.storage)),  # the shell's working directory: the project root
        (" storage/", f" {docs.storage}/"),
    ]


# docs/lvlm.md imports the official TSVs; here they are our export of lvlm_items (the same format)
OFFICIAL_TSVS = {
    "soco_lvlm_img_c.tsv": "soco_pipeline_vis.tsv",
    "soco_lvlm_imgtxt_c.tsv": "soco_pipeline_vis_desc.tsv",
    "soco_lvlm_txt_c.tsv": "soco_pipeline_desc.tsv",
}


IMPORT_TSVS = ".venv/bin/python -m soco_pipeline.lvlm import "
# a command that reads what an earlier line of its block writes: that line, run first
BEFORE = {IMPORT_TSVS: ".venv/bin/python -m soco_pipeline.lvlm export storage/vlmevalkit"}


def substituted(docs: Docs, text: str) -> str:
    for shown, here in placeholders(docs):
        text = text.replace(shown, here)
    return text


def run_process(
    docs: Docs, argv: list[str], stdin: str = "", timeout: float = 900
) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=PROJECT_ROOT, env=docs.env, input=stdin, capture_output=True, text=True, timeout=timeout
    )


def check_export(docs: Docs, command: Command) -> None:
    """An `export` line sets what the module's environment sets (its paths substituted)."""
    for assignment in shlex.split(substituted(docs, command.text))[1:]:
        name, _, value = assignment.partition("=")
        assert docs.env.get(name) == value, f"{command.where}: {assignment}; here {name}={docs.env.get(name)}"


def run_command(docs: Docs, command: Command) -> None:
    """Run one command as shown (placeholders substituted), in a fresh process; check its exit code."""
    if command.sql:
        argv = [str(VENV_BIN / "soco"), "sql", command.text]
    elif program(command.text) == "export":
        check_export(docs, command)
        return
    else:
        text = substituted(docs, command.text)
        if command.text.startswith(IMPORT_TSVS):  # the official TSVs: our export's
            (docs.root / "official").mkdir(exist_ok=True)
            for official, ours in OFFICIAL_TSVS.items():
                shutil.copy(docs.storage / "vlmevalkit" / ours, docs.root / "official" / official)
        if text.startswith("cp "):
            (docs.root / "copied_lvlms").mkdir(exist_ok=True)
        argv = shlex.split(text)
        if argv[0].startswith(".venv/bin/"):
            argv[0] = str(VENV_BIN / argv[0].removeprefix(".venv/bin/"))
        elif argv[0] in ("soco", "python"):
            argv[0] = str(VENV_BIN / argv[0])
    done = run_process(docs, argv, STDIN.get(program(command.text), ""))
    output = done.stdout[-3000:] + done.stderr[-3000:]
    code, shown = EXPECTED_FAILURE.get(command.text, (0, ""))
    assert done.returncode == code, f"{command.where}: {command.text}\nexit {done.returncode}\n{output}"
    assert shown in done.stdout + done.stderr, f"{command.where}: {command.text}\n{output}"


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """The first hour's settings in a folder of their own; the README's first `soco run` (every family) and
    an LVLM spec answered by the loopback server (kept serving for the module) materialize the tables the
    docs' commands and queries read."""
    from soco_pipeline.lvlm.loopback import loopback_answerers

    root = tmp_path_factory.mktemp("docs")
    storage, home = root / "storage", root / "home"
    write_instance_yaml(home, storage)
    (root / "backbones").mkdir()
    env = child_env(
        SOCO_CATEGORIES="car,dog",
        SOCO_IMAGES_PER_CATEGORY="4",
        SOCO_STORAGE=str(storage),
        DAGSTER_HOME=str(home),
        SOCO_BACKBONES_DIR=str(root / "backbones"),
        SOCO_LVLMS_DIR=str(root / "lvlms"),
        OMP_NUM_THREADS="1",
        **tiny_family_env(root / "families"),
    )
    docs = Docs(root, env)
    # my_lite0_320.yaml: the first hour's own checkpoint; here a copy of the part oracle (what is tested is
    # the command's path through every family, not a CNN's extraction, which the README's run does)
    spec = yaml.safe_load((PROJECT_ROOT / "assets" / "backbones" / "oracle_part.yaml").read_text())
    (root / "my_lite0_320.yaml").write_text(yaml.safe_dump(spec))
    readme_run = Command("README.md", ".venv/bin/soco run assets/backbone_presets/efficientnet_lite1.yaml")
    run_command(docs, readme_run)
    with loopback_answerers(str(storage / "tables"), root / "loopback") as server:
        # my_vlm.yaml: an LVLM spec (`backend: openai`), the loopback's seeded random answerer
        shutil.copy(server.specs["loopback_random"], root / "my_vlm.yaml")
        run_command(docs, Command("docs/first-hour.md", ".venv/bin/soco run my_vlm.yaml"))
        yield docs


def runnable() -> dict[str, list[Command]]:
    """{"docs/x.md:LINE": commands} of what runs here: one shell command, or the statements of a SQL block."""
    out: dict[str, list[Command]] = {}
    for command in (c for block in BLOCKS.values() for c in block if runs_here(c)):
        out.setdefault(command.where, []).append(command)
    return out


@pytest.mark.parametrize("where", list(runnable()))
def test_the_docs_command_runs_as_shown(docs, where):
    for command in runnable()[where]:
        for start, before in BEFORE.items():
            if command.text.startswith(start):
                run_command(docs, Command(f"{where} (before it)", before))
        run_command(docs, command)
