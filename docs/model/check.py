#!/usr/bin/env python3
"""Model-check every protocol eos-kafka runs, in every configuration: attempt fencing
(attempt_fencing.pml), progress records (progress_records.pml) and the source's group commit
(group_commit.pml).

For each configuration: ``spin -a`` with its -D defines, ``gcc -O1 -DSAFETY`` (``--optimize``) of the generated
pan.c (an exhaustive search: no bitstate hashing), ``./pan`` with a search depth far beyond the
model's, each in a directory of its own under a temporary directory. pan's report is parsed
(errors, states stored, transitions, depth, whether the search completed) and, when pan found a
violation, its trail is replayed with ``spin -t`` to show which invariants broke and how.

A configuration of the protocol must come out with 0 errors and a complete search; one with the
protection switched off (NO_CLAIMS) or with a deliberate mistake (MUTANT_*) must find an
assertion violation. The script prints a table and exits non-zero unless every configuration
meets its expectation (2 when spin or gcc is missing). ``--json`` prints the results as JSON.

With ``--pan-cache DIR`` a compiled pan is kept in DIR under a digest of what spin generated, the
compiler and its flags, and reused while they are the same (the test suite's warm runs): the
search itself always runs.

Usage: python3 docs/model/check.py [--json] [--only TEXT] [--jobs N] [--full] [--pan-cache DIR] [--optimize 0|1|2]
       (or: make model)
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

MODELS = Path(__file__).resolve().parent
MODEL = MODELS / "attempt_fencing.pml"
HOLDS, VIOLATION = "holds", "violation"
SEARCH_DEPTH = 100_000   # the deepest configuration reaches < 100 steps
MEMORY_LIMIT_MB = 2048
INSTALL_HINT = ("install it with `make spin` (Debian/Ubuntu: apt-get update && apt-get install -y spin), "
                "or from https://spinroot.com")


@dataclass(frozen=True)
class Config:
    name: str
    defines: tuple[str, ...]
    expect: str
    shows: str
    cflags: tuple[str, ...] = ()   # extra pan compile flags
    memory_mb: int = 0             # the search needs at least this much (pan -DMEMLIM)
    model: str = MODEL.name        # the Promela file, in docs/model/


CONFIGS = (
    # The protocol: no reachable state breaks an invariant.
    Config("2-attempts", ("ATTEMPTS=2",), HOLDS,
           "two attempts of a task (retry or speculative copy), different transactional ids"),
    Config("3-attempts", ("ATTEMPTS=3",), HOLDS, "three attempts, different transactional ids"),
    Config("2-attempts+batch-2", ("ATTEMPTS=2", "BATCH2"), HOLDS,
           "a zombie of batch 1 cannot move the offset back after batch 2 committed"),
    Config("2-attempts+restart", ("ATTEMPTS=2", "RESTART"), HOLDS,
           "a new run replays batch 1 while run 1's attempts are still alive"),
    Config("2-attempts,shared-id", ("ATTEMPTS=2", "REUSE_ID"), HOLDS,
           "the retry took over the first attempt's executor slot, so its transactional id"),
    Config("3-attempts,shared-id", ("ATTEMPTS=3", "REUSE_ID"), HOLDS,
           "attempts 1 and 2 share an id, attempt 3 has its own"),
    Config("3-attempts,release-in-flight", ("ATTEMPTS=3", "RELEASE_IN_FLIGHT"), HOLDS,
           "a RELEASE may be appended while the attempt's commit request is still in flight"),
    # Progress attempts (no group): a new run reads the dead run's claims back one transaction timeout,
    # and claims before its transaction opens; attempts may die anywhere, leaving what they had open.
    Config("progress:2-attempts+restart", ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST"), HOLDS,
           "a new run replays batch 1 while run 1's attempts are alive, no group membership to fence them"),
    Config("progress:2-attempts+restart,crashes", ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "CRASHES"),
           HOLDS, "the same with attempts dying anywhere: once the new run's attempt succeeded, none of their "
           "transactions is open"),
    Config("progress:2-attempts+restart,claims-after-records", ("ATTEMPTS=2", "RESTART", "PROGRESS"), HOLDS,
           "claiming once the records are in the transaction is safe as well..."),
    Config("progress:1-attempt+restart,crashes,claims-after-records",
           ("ATTEMPTS=1", "RESTART", "PROGRESS", "CRASHES"), VIOLATION,
           "...but an attempt dead between its records and its claim leaves its transaction open to the timeout"),
    # Format 2's layout: a control log and a claims log per pipeline; the first attempt of a plan reads the
    # control log only, unless a retry announced itself there.
    Config("split:2-attempts", ("ATTEMPTS=2", "SPLIT_LOG"), HOLDS,
           "a first attempt that reads only the control log, and a retry that announces itself"),
    Config("split:3-attempts", ("ATTEMPTS=3", "SPLIT_LOG"), HOLDS, "a first attempt and two retries"),
    Config("split:2-attempts+batch-2", ("ATTEMPTS=2", "BATCH2", "SPLIT_LOG"), HOLDS,
           "batch 2's first attempt does not read the claims log while a batch-1 zombie claims"),
    Config("split:2-attempts+restart", ("ATTEMPTS=2", "RESTART", "SPLIT_LOG"), HOLDS,
           "a new run's first attempt, run 1's zombies alive"),
    Config("split:2-attempts,shared-id", ("ATTEMPTS=2", "REUSE_ID", "SPLIT_LOG"), HOLDS,
           "the retry in the first attempt's executor slot"),
    Config("split:3-attempts,release-in-flight", ("ATTEMPTS=3", "RELEASE_IN_FLIGHT", "SPLIT_LOG"), HOLDS,
           "releases in flight with the control log's fast path"),
    # Progress attempts on it (none counts as first): an attempt whose task last committed in its own run reads the
    # claims log from its plan's start, any other from the look-back.
    Config("split:progress:2-attempts+restart", ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG"),
           HOLDS, "run 1's attempts reading from their plan's start, run 2's attempt from the look-back"),
    Config("split:progress:2-attempts+restart,crashes",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG", "CRASHES"), HOLDS,
           "the same with attempts dying anywhere: once run 2's attempt succeeded, none of theirs is open"),
    Config("split:progress:2-attempts+batch-2", ("ATTEMPTS=2", "BATCH2", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG"),
           HOLDS, "batch 2's attempt reading from its plan's start while a batch-1 zombie claims"),
    # An upgrade onto it: run 1 is an earlier version's on format 1's shared topic.
    Config("split:progress:upgrade:2-attempts+restart",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG", "UPGRADE"), HOLDS,
           "run 2's attempt, its task last committed on format 1, claims and reads in both topics"),
    Config("split:progress:upgrade:2-attempts+restart,crashes",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG", "UPGRADE", "CRASHES"), HOLDS,
           "the same with attempts dying anywhere: once run 2's attempt succeeded, none of theirs is open"),
    # The stable read sent beside the claims read, read again after any fence (a lever on a task's time).
    Config("early-read:2-attempts", ("ATTEMPTS=2", "EARLY_STABLE_READ"), HOLDS,
           "the stable read beside the claims read, read again when the attempt fenced an id"),
    Config("early-read:2-attempts+batch-2", ("ATTEMPTS=2", "BATCH2", "EARLY_STABLE_READ"), HOLDS,
           "the same with batch 2's attempt and a batch-1 zombie"),
    # The sink without claims: the stable read and the replay check alone.
    Config("no-claims:2-attempts", ("ATTEMPTS=2", "NO_CLAIMS"), VIOLATION,
           "two attempts with different ids both commit: duplicate output"),
    Config("no-claims:3-attempts", ("ATTEMPTS=3", "NO_CLAIMS"), VIOLATION, "the same with three attempts"),
    Config("no-claims:2-attempts+batch-2", ("ATTEMPTS=2", "BATCH2", "NO_CLAIMS"), VIOLATION,
           "a batch-1 zombie commits after batch 2: the offset moves back"),
    Config("no-claims:2-attempts,shared-id", ("ATTEMPTS=2", "REUSE_ID", "NO_CLAIMS"), HOLDS,
           "a retry in the same slot is fenced by its own init_transactions, claims or not"),
    Config("no-claims:1-attempt+restart", ("ATTEMPTS=1", "RESTART", "NO_CLAIMS"), HOLDS,
           "a new run is safe without claims: group membership and the stable read cover it"),
    # One mistake each: the checker must catch it (the model is not vacuous).
    Config("mutant:no-fence", ("ATTEMPTS=2", "MUTANT_NO_FENCE"), VIOLATION,
           "an attempt that does not fence older unreleased claims"),
    Config("mutant:no-stale-check", ("ATTEMPTS=2", "MUTANT_NO_STALE"), VIOLATION,
           "an attempt that goes on after reading a newer attempt's claim"),
    Config("mutant:early-release", ("ATTEMPTS=2", "MUTANT_EARLY_RELEASE"), VIOLATION,
           "a RELEASE appended before the transaction has ended"),
    Config("mutant:unstable-read+restart", ("ATTEMPTS=1", "RESTART", "MUTANT_UNSTABLE_READ"), VIOLATION,
           "a read of the group's offset that does not wait for pending transactional offsets"),
    Config("mutant:no-member-check+restart", ("ATTEMPTS=1", "RESTART", "MUTANT_NO_MEMBER_CHECK"), VIOLATION,
           "offsets taken from a replaced member: the runs' claims do not order them, layer 1 must"),
    Config("mutant:progress-no-lookback", ("ATTEMPTS=1", "RESTART", "PROGRESS", "CLAIM_FIRST", "MUTANT_NO_LOOKBACK"),
           VIOLATION, "a progress plan whose attempts read claims from their own plan only: no layer 1 fences run 1"),
    Config("mutant:early-read-kept-after-fence", ("ATTEMPTS=2", "MUTANT_EARLY_STABLE_READ"), VIOLATION,
           "a stable read sent beside the claims read and used after fencing an id: both attempts commit"),
    Config("mutant:split-no-announce", ("ATTEMPTS=2", "SPLIT_LOG", "MUTANT_NO_ANNOUNCE"), VIOLATION,
           "a retry that claims without announcing itself: the first attempt does not read its claim"),
    Config("mutant:split-progress-run-start-fast",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG", "MUTANT_RUN_START_FAST"), VIOLATION,
           "a progress attempt reading from its plan's start whatever run last committed its task: it misses run 1's "
           "claim"),
    Config("mutant:split-progress-upgrade-pipeline-only",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG", "UPGRADE", "MUTANT_UPGRADE_PIPELINE_ONLY"),
           VIOLATION, "after an upgrade, run 2's attempt reads only its pipeline's claims log: it misses run 1's claim"),
    Config("mutant:split-progress-upgrade-shared-unclaimed",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "SPLIT_LOG", "UPGRADE", "MUTANT_SHARED_UNCLAIMED"),
           VIOLATION, "run 2's attempt reads the shared topic without claiming there: a run-1 attempt claiming later "
           "misses it"),
    Config("mutant:split-control-before-claim", ("ATTEMPTS=2", "SPLIT_LOG", "MUTANT_CONTROL_BEFORE_CLAIM"), VIOLATION,
           "a first attempt that reads the control log before appending its claim"),
)

PROGRESS_RECORDS = "progress_records.pml"


def _records(name: str, defines: tuple[str, ...], expect: str, shows: str, cflags=(), memory_mb=0) -> Config:
    return Config(name, defines, expect, shows, cflags, memory_mb, PROGRESS_RECORDS)


# progress_records.pml: the progress records of streams without a group and of idempotent batch
# writes, with the host's write slots, their lock files and the look-back across runs.
CONFIGS += (
    _records("progress-records:retry", ("RETRY",), HOLDS, "two attempts of a batch in one run"),
    _records("progress-records:retry,crashes", ("RETRY", "CRASHES"), HOLDS,
             "the same with attempts dying anywhere: once the newest succeeded, no dead attempt's transaction is open"),
    _records("progress-records:retry,crashes,other-task", ("RETRY", "CRASHES", "OTHER_TASK"), HOLDS,
             "another task leases a dead attempt's slot: its lock file proves a fence only once its producer is made"),
    _records("progress-records:restart", ("RESTART",), HOLDS,
             "a new run replays the batch while run 1's attempt is alive; no group membership fences it"),
    _records("progress-records:restart,crashes,other-task", ("RESTART", "CRASHES", "OTHER_TASK"), HOLDS,
             "a new run, dying attempts, and another task taking their slots"),
    _records("progress-records:next-version", ("NEXT_VERSION",), HOLDS,
             "a zombie of batch 1 after batch 2 was written: the progress never moves back"),
    _records("progress-records:versioned", ("VERSIONED",), HOLDS,
             "txnVersion 1, 2, then a rerun of 1: the older version is skipped, never written"),
    _records("progress-records:executor-ids", ("EXECUTOR_IDS",), HOLDS,
             "one id held in two applications at once (ids named executors): an id's newest claim is fenced"),
    _records("no-claims:progress-records:retry", ("RETRY", "NO_CLAIMS"), VIOLATION,
             "without claims two attempts of a batch both write it"),
    _records("no-claims:progress-records:next-version", ("NEXT_VERSION", "NO_CLAIMS"), VIOLATION,
             "without claims a zombie writes its batch again"),
    _records("mutant:progress-records-oldest-claim", ("EXECUTOR_IDS", "MUTANT_OLDEST_CLAIM"), VIOLATION,
             "the fence decided on an id's oldest claim (before 1e6a788): a holder initialized after it skips the fence"),
    _records("mutant:progress-records-taken-over-unmade", ("RETRY", "CRASHES", "OTHER_TASK", "MUTANT_TAKEN_OVER_UNMADE"),
             VIOLATION, "any other holder in the lock file taken as proof, its producer made or not: a dead "
             "attempt's transaction stays open"),
    _records("mutant:progress-records-no-lookback", ("RESTART", "MUTANT_NO_LOOKBACK"), VIOLATION,
             "a new run's attempt reads claims from its own plan only: run 1's attempt commits too"),
)

GROUP_COMMIT = "group_commit.pml"


def _group(name: str, defines: tuple[str, ...], expect: str, shows: str) -> Config:
    return Config(f"group-commit:{name}", defines, expect, shows, model=GROUP_COMMIT)


# group_commit.pml: the source's commits of its group's offsets after the batches Spark completed,
# beside a narrow pipeline's tasks that commit the same offsets in their transactions.
CONFIGS += (
    _group("shuffle:3-batches", ("SHUFFLE", "BATCHES=3"), HOLDS,
           "the driver commits each completed batch's end: never ahead of the output, never back"),
    _group("shuffle:3-batches+restart", ("SHUFFLE", "BATCHES=3", "RESTART"), HOLDS,
           "run 1's driver dies anywhere, its sent commit in flight; run 2 replays from the checkpoint"),
    _group("shuffle:3-batches+second-instance", ("SHUFFLE", "BATCHES=3", "SECOND_INSTANCE"), HOLDS,
           "a second instance with a copy of the checkpoint joins while the first runs on"),
    _group("shuffle:3-batches+restart,in-flight", ("SHUFFLE", "BATCHES=3", "RESTART", "COMMIT_IN_FLIGHT"), HOLDS,
           "the driver goes on with a commit in flight: one member's commits stay in order (one thread)"),
    _group("shuffle:3-batches+second-instance,in-flight", ("SHUFFLE", "BATCHES=3", "SECOND_INSTANCE",
                                                           "COMMIT_IN_FLIGHT"), HOLDS,
           "the same with a second instance: the fenced instance's late commits are refused"),
    _group("narrow:3-batches", ("NARROW", "BATCHES=3"), HOLDS,
           "tasks commit offsets in their transactions, the driver's commits around them"),
    _group("narrow:3-batches+restart", ("NARROW", "BATCHES=3", "RESTART"), HOLDS,
           "a driver dying anywhere: the replayed batch is skipped or committed once"),
    _group("narrow:3-batches+second-instance", ("NARROW", "BATCHES=3", "SECOND_INSTANCE"), HOLDS,
           "a second instance behind the group: never back, each batch's output once"),
    _group("narrow:3-batches+restart,spark-4.1", ("NARROW", "BATCHES=3", "RESTART", "SPARK_41"), HOLDS,
           "PySpark 4.0/4.1's order: commit(end) after the next batch's offset log entry"),
    _group("narrow:3-batches,in-flight", ("NARROW", "BATCHES=3", "COMMIT_IN_FLIGHT"), HOLDS,
           "a sent commit the driver stops waiting for: the stable read sends none behind a task's transaction"),
    _group("narrow:3-batches+restart,answered-in-flight", ("NARROW", "BATCHES=3", "RESTART", "COMMIT_IN_FLIGHT",
                                                           "ANSWERED_IN_FLIGHT"), HOLDS,
           "commits that land after their answer (a client timeout), drivers dying anywhere"),
    _group("narrow:3-batches+second-instance,answered-in-flight", ("NARROW", "BATCHES=3", "SECOND_INSTANCE",
                                                                   "COMMIT_IN_FLIGHT", "ANSWERED_IN_FLIGHT"), HOLDS,
           "the same with a second instance"),
    _group("narrow:3-batches+restart,no-backward-check", ("NARROW", "BATCHES=3", "RESTART", "MUTANT_BACKWARD"), HOLDS,
           "a restart on its own checkpoint never asks for an end below C: the check is for a checkpoint behind"),
    # A limit of the protocol, which the checker must keep finding until it is closed (README).
    _group("limit:shuffle:3-batches,answered-in-flight", ("SHUFFLE", "BATCHES=3", "COMMIT_IN_FLIGHT",
                                                          "ANSWERED_IN_FLIGHT"), VIOLATION,
           "LIMIT: a commit answered REQUEST_TIMED_OUT that lands after the next one moves C back (no output twice)"),
    # One mistake each, which the checker must find.
    _group("mutant:unstable-commit-read", ("NARROW", "BATCHES=2", "COMMIT_IN_FLIGHT", "MUTANT_UNSTABLE_COMMIT_READ"),
           VIOLATION, "the code before the stable read: a late plain commit of batch 1 moves C back from 2"),
    _group("mutant:unstable-commit-read,output", ("NARROW", "BATCHES=2", "COMMIT_IN_FLIGHT",
                                                  "MUTANT_UNSTABLE_COMMIT_READ", "ASSERT_OUTPUT_ONLY"), VIOLATION,
           "...and batch 2's retried task finds C at its start: batch 2's output twice"),
    _group("mutant:backward+second-instance", ("SHUFFLE", "BATCHES=2", "SECOND_INSTANCE", "MUTANT_BACKWARD"),
           VIOLATION, "no committed < end check: an instance whose checkpoint is behind the group moves C back"),
    _group("mutant:backward+second-instance,narrow", ("NARROW", "BATCHES=2", "SECOND_INSTANCE", "MUTANT_BACKWARD"),
           VIOLATION, "the same with narrow tasks: a batch's output twice"),
    _group("mutant:at-plan", ("SHUFFLE", "BATCHES=2", "MUTANT_AT_PLAN"), VIOLATION,
           "committing the planned end at latestOffset: C ahead of the visible output"),
    _group("mutant:no-generation+restart", ("SHUFFLE", "BATCHES=2", "RESTART", "MUTANT_NO_GENERATION"), VIOLATION,
           "commits not tied to the member id: a dead run's late commit moves C back"),
)

# --full adds these: minutes and gigabytes each (COLLAPSE compresses the stored states
# losslessly, so the searches stay exhaustive).
FULL_CONFIGS = (
    Config("3-attempts+batch-2", ("ATTEMPTS=3", "BATCH2"), HOLDS,
           "three attempts of batch 1 and one of batch 2", ("-DCOLLAPSE",), 2048),
    Config("3-attempts+restart", ("ATTEMPTS=3", "RESTART"), HOLDS,
           "three attempts of batch 1 in run 1 and one in a new run", ("-DCOLLAPSE",), 8192),
    _records("progress-records:restart+retry", ("RESTART_RETRY",), HOLDS,
             "a new run with two attempts, run 1's alive", ("-DCOLLAPSE",), 2048),
    _records("progress-records:restart+retry,crashes", ("RESTART_RETRY", "CRASHES"), HOLDS,
             "the same with attempts dying anywhere", ("-DCOLLAPSE",), 4096),
    # Larger configurations (millions of states each), kept out of the test suite's run.
    _records("progress-records:next-version,crashes", ("NEXT_VERSION", "CRASHES"), HOLDS,
             "a zombie of batch 1 after batch 2 was written, attempts dying anywhere"),
    _records("progress-records:versioned,crashes", ("VERSIONED", "CRASHES"), HOLDS,
             "txnVersion 1, 2, then a rerun of 1, attempts dying anywhere"),
    _records("progress-records:executor-ids,crashes", ("EXECUTOR_IDS", "CRASHES"), HOLDS,
             "one id held in two applications at once, attempts dying anywhere"),
    Config("early-read:split:3-attempts", ("ATTEMPTS=3", "SPLIT_LOG", "EARLY_STABLE_READ"), HOLDS,
           "the stable read beside the claims read in layout 2, three attempts"),
    Config("early-read:progress:2-attempts+restart,crashes",
           ("ATTEMPTS=2", "RESTART", "PROGRESS", "CLAIM_FIRST", "CRASHES", "EARLY_STABLE_READ"), HOLDS,
           "the stable read beside the claims read for progress attempts across runs, attempts dying anywhere"),
    # A proposal, not the code: what would close the shuffle limit above.
    _group("proposal:shuffle:3-batches+restart,answered-in-flight,rejoin",
           ("SHUFFLE", "BATCHES=3", "RESTART", "COMMIT_IN_FLIGHT", "ANSWERED_IN_FLIGHT", "FIX_REJOIN"), HOLDS,
           "rejoining under a new member id after a commit's outcome is unknown fences the late commit"),
)


@dataclass
class Result:
    name: str
    defines: list[str]
    expect: str
    shows: str
    model: str = MODEL.name
    ok: bool = False
    errors: int | None = None
    complete: bool = False
    exhaustive: bool = False
    states_stored: int | None = None
    states_matched: int | None = None
    transitions: int | None = None
    depth: int | None = None
    state_vector_bytes: int | None = None
    search_seconds: float | None = None
    total_seconds: float | None = None
    violation: str | None = None            # pan's first error, e.g. "assertion violated (visible[1]<=1)"
    violation_depth: int | None = None
    failed_assertions: list[str] = field(default_factory=list)   # every assertion the trail's last step breaks
    trail_steps: int | None = None
    trail: list[str] = field(default_factory=list)               # the model's printf lines along the trail
    problem: str | None = None              # why the configuration did not meet its expectation


def find_tools() -> tuple[str, str]:
    """spin and a C compiler from PATH; SystemExit with what to install if one is missing."""
    spin, gcc = shutil.which("spin"), shutil.which("gcc") or shutil.which("cc")
    if spin is None:
        raise SystemExit(f"check.py: spin (the model checker) is not on PATH: {INSTALL_HINT}")
    if gcc is None:
        raise SystemExit("check.py: no C compiler (gcc or cc) on PATH: pan.c, the verifier spin generates, "
                         "needs one (Debian/Ubuntu: apt-get install -y gcc)")
    return spin, gcc


def spin_version(spin: str) -> str:
    out = subprocess.run([spin, "-V"], capture_output=True, text=True).stdout.strip()
    return out or "unknown"


def _int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text, re.MULTILINE)
    return int(float(match.group(1))) if match else None   # pan writes large counts as 1.1355817e+08


def parse_pan(text: str, result: Result) -> None:
    result.exhaustive = "Full statespace search for:" in text
    result.state_vector_bytes = _int(r"State-vector (\d+) byte", text)
    result.depth = _int(r"depth reached (\d+)", text)
    result.errors = _int(r"errors: (\d+)", text)
    count = r"([0-9][0-9.e+]*)"
    result.states_stored = _int(rf"^\s*{count} states, stored", text)
    result.states_matched = _int(rf"^\s*{count} states, matched", text)
    result.transitions = _int(rf"^\s*{count} transitions", text)
    elapsed = re.search(r"pan: elapsed time ([0-9.e+-]+) seconds", text)
    result.search_seconds = float(elapsed.group(1)) if elapsed else None
    first = re.search(r"^pan:\d+: (.*?)(?: \(at depth (\d+)\))?$", text, re.MULTILINE)
    if first:
        result.violation = first.group(1)
        result.violation_depth = int(first.group(2)) if first.group(2) else None
    truncated = ("Search not completed" in text or "max search depth too small" in text
                 or "out of memory" in text.lower())
    result.complete = result.exhaustive and result.errors is not None and not truncated


def parse_replay(text: str, result: Result) -> None:
    for line in text.splitlines():
        if line.startswith("spin: text of failed assertion:"):
            result.failed_assertions.append(line.split(":", 2)[2].strip())
        elif line.startswith("spin: trail ends after"):
            result.trail_steps = _int(r"after (\d+) steps", line)
            break
        elif line.startswith("spin:") or not line.strip():
            continue
        else:
            result.trail.append(line.strip())


def run(command: list[str], cwd: Path, step: str) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{step} failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    return done.stdout


def compile_pan(gcc: str, flags: list[str], work: Path, cache: Path | None, optimize: int = 1) -> None:
    """gcc of the pan.c in ``work`` into ``work``/pan, or the copy ``cache`` keeps of the same build."""
    command = [gcc, f"-O{optimize}", "-w", "-DSAFETY", *flags, "-o", "pan", "pan.c"]
    if cache is None:
        run(command, work, "gcc")
        return
    compiler = f"{shutil.which(gcc) or gcc} {run([gcc, '--version'], work, 'gcc --version')}"
    digest = hashlib.sha256(" ".join([*command, compiler]).encode())
    for source in sorted(work.glob("pan.*")):  # pan.c and the files it includes
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    kept = cache / digest.hexdigest()[:24]
    if not kept.exists():
        run(command, work, "gcc")
        cache.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.partial")
        shutil.copy2(work / "pan", partial)
        partial.replace(kept)  # whole or absent, also with several checks at once
    shutil.copy2(kept, work / "pan")


def run_pan(work: Path, attempts: int = 100) -> subprocess.CompletedProcess:
    # Checks run in threads: a child another thread forks holds the descriptor this thread wrote
    # pan through until that child execs, and exec refuses a file open for writing (ETXTBSY).
    while True:
        try:
            return subprocess.run(["./pan", f"-m{SEARCH_DEPTH}", "-n", "-c1"], cwd=work, capture_output=True,
                                  text=True)
        except OSError as error:
            attempts -= 1
            if error.errno != errno.ETXTBSY or attempts == 0:
                raise
            time.sleep(0.05)


def check(config: Config, spin: str, gcc: str, root: Path, memory_limit_mb: int = MEMORY_LIMIT_MB,
          pan_cache: Path | None = None, optimize: int = 1) -> Result:
    result = Result(config.name, list(config.defines), config.expect, config.shows, config.model)
    started = time.monotonic()
    work = root / re.sub(r"[^A-Za-z0-9]+", "_", config.name)
    work.mkdir()
    model = config.model
    shutil.copy(MODELS / model, work / model)
    defines = [f"-D{d}" for d in config.defines]
    try:
        run([spin, "-a", *defines, model], work, "spin -a")
        # -w: spin's generated C draws compiler warnings that say nothing about the model.
        compile_pan(gcc, [*config.cflags, f"-DMEMLIM={memory_limit_mb}"], work, pan_cache, optimize)
        pan = run_pan(work)
        parse_pan(pan.stdout + pan.stderr, result)
        # spin names the trail after the model, with a leading "_" for some names: whichever it wrote.
        if result.errors and any(work.glob("*.trail")):
            parse_replay(run([spin, "-t", "-T", *defines, model], work, "spin -t"), result)
    except RuntimeError as error:
        result.problem = str(error)
    result.total_seconds = round(time.monotonic() - started, 2)
    if result.problem is None:
        result.problem = judge(result)
    result.ok = result.problem is None
    return result


def judge(result: Result) -> str | None:
    if result.errors is None or result.states_stored is None:
        return "pan's report could not be read"
    if not result.exhaustive:
        return "not an exhaustive search"
    if result.expect == HOLDS:
        if result.errors:
            return f"expected no violation, found: {result.violation}"
        if not result.complete:
            return "the search did not complete (depth limit or memory)"
        return None
    if not result.errors:
        return "expected a violation, the search found none"
    if not (result.violation or "").startswith("assertion violated"):
        return f"expected an assertion violation, found: {result.violation}"
    return None


def number(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:.2f}"


def print_table(results: list[Result], version: str) -> None:
    headers = ("configuration", "expected", "result", "errors", "states stored", "transitions", "depth",
               "search s", "total s")
    rows = [(r.name, r.expect, ("ok" if r.ok else "FAIL") + ("" if r.complete or r.errors else " (incomplete)"),
             number(r.errors), number(r.states_stored), number(r.transitions), number(r.depth),
             number(r.search_seconds), number(r.total_seconds)) for r in results]
    widths = [max(len(str(row[i])) for row in (headers, *rows)) for i in range(len(headers))]
    models = ", ".join(sorted({r.model for r in results}))
    print(f"{version}; models {models}; exhaustive search (-DSAFETY), depth limit {SEARCH_DEPTH:,}\n")
    for row in (headers, tuple("-" * w for w in widths), *rows):
        print("  ".join(str(cell).ljust(w) if i < 3 else str(cell).rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    for r in results:
        if r.errors:
            print(f"\n{r.name}: {r.violation} at depth {r.violation_depth} ({r.shows})")
            if r.failed_assertions:
                print(f"  broken at the trail's last step: {', '.join(r.failed_assertions)}")
            for line in r.trail:
                print(f"    {line}")
    for r in results:
        if not r.ok:
            print(f"\nFAIL {r.name}: {r.problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--only", metavar="TEXT", help="only the configurations whose name contains TEXT")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="configurations checked at once")
    parser.add_argument("--full", action="store_true",
                        help=f"also the larger configurations ({', '.join(c.name for c in FULL_CONFIGS)}): "
                             "minutes, and up to 8 GB of memory")
    parser.add_argument("--memory-mb", type=int, default=MEMORY_LIMIT_MB,
                        help="memory limit of each search in MB (pan -DMEMLIM; more where a configuration "
                             "needs it), default %(default)s")
    parser.add_argument("--pan-cache", type=Path, metavar="DIR",
                        help="keep each compiled pan in DIR and reuse it while the model and the compiler are the same")
    parser.add_argument("--optimize", type=int, choices=(0, 1, 2), default=1,
                        help="gcc's -O level for pan (default %(default)s); 0 compiles pan in about a third of the "
                             "time and searches at about half the speed: quicker where the searches take seconds")
    args = parser.parse_args(argv)
    try:
        spin, gcc = find_tools()
    except SystemExit as missing:
        print(missing.code, file=sys.stderr)
        return 2
    configs = [c for c in (*CONFIGS, *(FULL_CONFIGS if args.full else ())) if args.only is None or args.only in c.name]
    if not configs:
        print(f"check.py: no configuration matches {args.only!r}", file=sys.stderr)
        return 2
    version = spin_version(spin)
    with tempfile.TemporaryDirectory(prefix="attempt-fencing-") as root:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda c: check(c, spin, gcc, Path(root), max(args.memory_mb, c.memory_mb),
                                                           args.pan_cache, args.optimize),
                                    configs))
    ok = all(r.ok for r in results)
    if args.json:
        print(json.dumps({"ok": ok, "spin": version, "models": sorted({r.model for r in results}), "search_depth": SEARCH_DEPTH,
                          "results": [asdict(r) for r in results]}, indent=2))
    else:
        print_table(results, version)
        print(f"\n{'all' if ok else 'NOT all'} {len(results)} configurations met their expectation")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
