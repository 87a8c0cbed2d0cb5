"""The models of eos-kafka's protocols (docs/model/*.pml: attempt fencing, progress records, the
source's group commit), checked with spin.

docs/model/check.py runs every configuration of every model; this test runs it once, with this
interpreter and the compiled verifiers kept in .cache/ between runs, and checks each configuration's
result: the protocol's configurations hold (a complete exhaustive search, no error), and the ones
with the claims switched off (NO_CLAIMS) or with a deliberate mistake (MUTANT_*) make the checker
find a violation. spin must be installed
(``make spin``); without it the test fails rather than skip.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
CHECK_SCRIPT = CHECKOUT / "docs" / "model" / "check.py"
# Compiling the verifiers is most of a cold check's CPU: a warm run reuses them (the searches run),
# and they are compiled unoptimized, in about a third of the time, which costs the searches, all of a
# few seconds here, about as much again (check.py --optimize).
PAN_CACHE = CHECKOUT / ".cache" / "model-pan"


def _load_check_module():
    spec = importlib.util.spec_from_file_location("attempt_fencing_model_check", CHECK_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


check = _load_check_module()
CONFIGS = {config.name: config for config in check.CONFIGS}


@functools.cache
def _report() -> dict:
    if shutil.which("spin") is None:
        pytest.fail("spin, the model checker, is not installed: run `make spin` "
                    "(it installs the Debian package spin), then run the tests again", pytrace=False)
    command = [sys.executable, str(CHECK_SCRIPT), "--json", "--optimize", "0", "--pan-cache", str(PAN_CACHE)]
    done = subprocess.run(command, cwd=CHECKOUT, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), f"check.py failed to run (exit {done.returncode}):\n{done.stderr}"
    assert done.stdout.startswith("{"), f"check.py printed no report (exit {done.returncode}):\n{done.stderr}"
    return json.loads(done.stdout)


def _result(name: str) -> dict:
    results = {r["name"]: r for r in _report()["results"]}
    assert name in results, f"check.py did not report configuration {name!r}"
    return results[name]


def _no_claims(config) -> bool:
    return "NO_CLAIMS" in config.defines


def test_configurations_cover_two_and_three_attempts_and_a_second_batch():
    protocol = [c for c in CONFIGS.values() if not _no_claims(c) and not any(d.startswith("MUTANT_") for d in c.defines)]
    no_claims_violations = [c for c in CONFIGS.values() if _no_claims(c) and c.expect == check.VIOLATION]
    for wanted in (("ATTEMPTS=2",), ("ATTEMPTS=3",), ("ATTEMPTS=2", "BATCH2")):
        assert any(set(c.defines) == set(wanted) and c.expect == check.HOLDS for c in protocol), wanted
        assert any(set(c.defines) == {*wanted, "NO_CLAIMS"} for c in no_claims_violations), wanted


@pytest.mark.parametrize("name", [name for name, c in CONFIGS.items() if c.expect == check.HOLDS])
def test_holds(name):
    result = _result(name)
    what = f"{name} ({' '.join(result['defines'])}): {result['shows']}"
    assert result["exhaustive"], f"{what}: not an exhaustive search"
    assert result["errors"] == 0, (f"{what}: spin found {result['violation']}; trail:\n  "
                                   + "\n  ".join(result["trail"]))
    assert result["complete"], f"{what}: the search did not complete"
    assert result["states_stored"] and result["states_stored"] > 0
    assert result["ok"], result["problem"]


@pytest.mark.parametrize("name", [name for name, c in CONFIGS.items() if c.expect == check.VIOLATION])
def test_finds_violation(name):
    result = _result(name)
    what = f"{name} ({' '.join(result['defines'])}): {result['shows']}"
    assert result["errors"] >= 1, f"{what}: spin found no violation, the model no longer shows the failure"
    assert result["violation"].startswith("assertion violated"), f"{what}: found {result['violation']}"
    assert result["failed_assertions"] and result["trail"], f"{what}: the trail was not replayed"
    assert result["ok"], result["problem"]


def test_every_configuration_met_its_expectation():
    report = _report()
    assert report["ok"], [(r["name"], r["problem"]) for r in report["results"] if not r["ok"]]
    assert {r["name"] for r in report["results"]} == set(CONFIGS)


def _runtime_names() -> dict[str, object]:
    """Every runtime module of the package by its last name, and every class in them by its name."""
    import importlib
    import inspect
    import pkgutil

    import pyspark_eos

    names: dict[str, object] = {}
    for info in pkgutil.walk_packages(pyspark_eos.__path__, "pyspark_eos."):
        if ".testing" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        names[info.name.rsplit(".", 1)[-1]] = module
        names.update({name: value for name, value in vars(module).items()
                      if inspect.isclass(value) and value.__module__ == info.name})
    return names


STEP_TABLES = ("#### Model actions and the code", "### Progress records: model steps and the code",
               "### Group commit: model steps and the code")


@pytest.mark.parametrize("heading", STEP_TABLES)
def test_every_name_of_code_in_a_models_table_of_steps_is_in_the_code(heading):
    """Each model's table of steps names where each step is done: the code column's names exist."""
    import re

    text = (CHECKOUT / "docs" / "model" / "README.md").read_text()
    assert heading in text, f"docs/model/README.md has no section {heading!r}"
    table = text.split(heading, 1)[1].split("\n\n", 2)[1]
    cited = [name for row in table.splitlines()[2:] for name in re.findall(r"`([A-Za-z_][\w.]*)`", row.split("|")[4])]
    assert len(cited) > 8
    names = _runtime_names()
    missing = []
    for name in cited:
        first, *rest = name.split(".")
        found = names.get(first)
        for attribute in rest:
            found = getattr(found, attribute, None)
        if found is None:
            missing.append(name)
    assert missing == []


def test_every_model_has_configurations_that_hold_and_a_seeded_bug_that_spin_finds():
    for model in ("attempt_fencing.pml", "progress_records.pml", "group_commit.pml"):
        configs = [c for c in CONFIGS.values() if c.model == model]
        assert any(c.expect == check.HOLDS for c in configs), model
        assert any(c.expect == check.VIOLATION and any(d.startswith("MUTANT_") for d in c.defines) for c in configs), model
