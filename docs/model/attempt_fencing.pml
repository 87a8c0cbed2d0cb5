/*
 * attempt_fencing.pml: the sink's per-task commit protocol ("attempt fencing"), in Promela.
 *
 * One Spark write task reads the input range [s, e) of one Kafka partition and commits, in ONE
 * Kafka transaction, its output records and the consumer group's offset e (KIP-447,
 * sendOffsetsToTransaction). Spark may run several attempts of the task: a retry after the
 * executor was declared lost (while it only stalled: GC pause, network partition) or a
 * speculative copy. Every attempt that is not told otherwise goes on to commit. This model
 * checks that, whatever the interleaving and wherever attempts stall, fail or crash, each
 * batch's output becomes visible at most once, the group's committed offset never moves back,
 * and the offset is at a batch's end exactly when that batch's output is visible.
 *
 * Configuration (spin -a -DNAME[=VALUE] attempt_fencing.pml; docs/model/check.py runs them all):
 *   ATTEMPTS=n   attempts of batch 1's task in the run (1, 2 or 3)
 *   BATCH2       one more attempt: batch 2's task, launched once batch 1's task succeeded
 *   RESTART      one more attempt: batch 1's task again, in a new run of the query (a restarted
 *                driver that replays batch 1; it joins the group and plans anew)
 *   REUSE_ID     attempt 2 uses attempt 1's transactional id (a retry in the same executor slot)
 *   NO_CLAIMS    skip steps 3 and 4: the stable read and the replay check only (the sink before
 *                attempt fencing)
 *   RELEASE_IN_FLIGHT  an attempt may append its RELEASE while its commit request is in flight
 *   PROGRESS     the attempts commit progress records (a query without a group, a foreachBatch or
 *                idempotent batch write): the groups have no members, so no layer 1, and a new
 *                run's attempt reads the claims of every run (its plan's lookback, one transaction
 *                timeout back, holds every claim whose transaction may still be open)
 *   CLAIM_FIRST  steps 3, 4 and 4b (claim, read, fence) before step 2 (the transaction opened by
 *                the first record): how progress attempts run
 *   CRASHES      an attempt may die at any step after its init (SIGKILL, its driver killed with
 *                it): no abort, no release. Checked: when the newest attempt succeeds, no
 *                transaction of a dead attempt is open (readers are not held back for the
 *                broker's transaction timeout)
 *   (claims name their run's membership: an attempt reads only its own run's claims; between
 *   runs, the group membership and the stable read decide)
 *   SPLIT_LOG    the claims layout of format 2: each pipeline has a topic of its own with two
 *                partitions, a control log (plan records, generation stamps, ANNOUNCE records) and
 *                a claims log (claims, releases). The first attempt of a task under its plan
 *                appends its claim, then reads only the control log from its plan record to its
 *                end; it reads the claims log too (as every attempt did in format 1) only if an
 *                ANNOUNCE of its task is there. Every other attempt (a retry, a speculative copy)
 *                appends an ANNOUNCE to the control log before its claim, and reads the claims log
 *                from its plan's start to its claim. With PROGRESS no attempt counts as first (a
 *                progress write may read shuffle output: a stage Spark attempts again after a fetch
 *                failure numbers its tasks from 0 again, and PySpark tells a task nothing of its
 *                stage attempt), so none announces and every one reads the claims log; and as no
 *                group membership fences an earlier run, an attempt first reads its task's last
 *                committed progress, which names the run that committed it (Spark's run id) and
 *                the layout it was committed on: an attempt whose task last committed in its own
 *                run reads the claims log from its plan's start; any other (another run, nothing
 *                committed, an open transaction in the way) from the look-back.
 *   UPGRADE      with SPLIT_LOG, PROGRESS and RESTART: run 1 is an earlier version's, on the layout
 *                of format 1 (claims in the one shared topic, read from the look-back to the
 *                claim); batch 0 was committed on it. An attempt whose task last committed on that
 *                layout (or whose last commit it cannot tell) also claims in the shared topic and
 *                reads it from the look-back to that claim.
 *   EARLY_STABLE_READ  the stable read (5) sent as soon as the claim is acknowledged, beside the
 *                claims read and the fences, and sent again after them if the attempt fenced an id
 *   MUTANT_*     the protocol with one mistake (see each #ifdef): the checker must find it
 *
 * Granularity: each atomic block below is ONE Kafka request (with the local decision taken on
 * its answer), or one step of Spark's scheduler. Nothing larger is atomic, so every interleaving
 * of the requests of all attempts, the drivers and the broker is explored. An attempt that is
 * never scheduled again has crashed or stalled for good; one scheduled late has stalled that long.
 *
 * Offsets are small integers: batch 1 reads [0, 1), batch 2 reads [1, 2). For batch b,
 * s = b - 1 and e = b.
 */

#ifndef ATTEMPTS
#define ATTEMPTS 2
#endif

#if defined(BATCH2) && defined(RESTART)
#error "BATCH2 and RESTART are separate configurations"
#endif
#if defined(UPGRADE) && !(defined(SPLIT_LOG) && defined(PROGRESS) && defined(RESTART) && defined(CLAIM_FIRST))
#error "UPGRADE is a progress pipeline's restart onto SPLIT_LOG"
#endif

#if defined(BATCH2) || defined(RESTART)
#define NA (ATTEMPTS + 1)       /* attempts in all; the batch-2 / new-run attempt is the last */
#else
#define NA ATTEMPTS
#endif

#define MAXID 5                 /* transactional ids 1..4 (index 0 unused) */

#if defined(CRASHES) && defined(REUSE_ID)
#error "CRASHES marks dead attempts by transactional id: one id per attempt"
#endif
#define LOGMAX (2 * NA + 2)     /* two plan records, and a CLAIM and a RELEASE per attempt */

/* Claims topic records, packed into a byte: kind, attempt epoch, transactional id. */
#define CLAIM   1
#define RELEASE 2
#define PLAN    3               /* a driver's record of a new plan: that plan's attempts read claims from it */
/* SPLIT_LOG: a retry's notice in the control log, before its claim; codes are per log, and the
 * control log's fit in a byte only with ANNOUNCE coded as CLAIM is in the claims log */
#define ANNOUNCE CLAIM
#define ENTRY(kind, ep, tid) ((kind) * 64 + (ep) * 8 + (tid))
#define KIND(x)  ((x) / 64)
#define EPOCH(x) (((x) / 8) % 8)
#define TXNID(x) ((x) % 8)
/* The run whose driver's membership planned an attempt (a claim carries its plan's membership
 * token). With RESTART the last attempt is run 2's; all others are run 1's. */
#if defined(RESTART) && !defined(PROGRESS)
#define RUN_OF(ep) ((ep) == NA -> 2 : 1)
#define SAME_RUN(ep, r) (RUN_OF(ep) == (r))
#else
#define RUN_OF(ep) 1
#define SAME_RUN(ep, r) true    /* progress claims name no membership: one order over every run */
#endif

/* SPLIT_LOG: the first attempt of its plan (Spark's attempt 0 of the task in the stage's first
 * attempt) reads the control log, and the claims log only if the control log tells it to; every
 * other attempt announces itself there first. Attempt 1 is batch 1's first in run 1 (a plan of
 * run 1 after its first: the claims before it are of attempts that ended); the last attempt, of
 * batch 2 or of run 2, is the first of its plan. */
#if defined(SPLIT_LOG) && !defined(NO_CLAIMS) && !defined(PROGRESS)
#define FIRST_OF_PLAN(me) ((me) == 1 || (me) == NA && NA > ATTEMPTS)
#else
#define FIRST_OF_PLAN(me) false
#endif
/* Only a pipeline with a first attempt on the fast path needs the other attempts' announcements. */
#ifdef PROGRESS
#define ANNOUNCES(me) false
#else
#define ANNOUNCES(me) (!FIRST_OF_PLAN(me))
#endif
/* SPLIT_LOG with PROGRESS: what an attempt makes of its task's last committed progress, read
 * (without waiting) before it claims. SAME: committed in its own run, on the pipeline's layout:
 * every earlier run's attempt of the task was fenced or refused by the attempt of this run that
 * committed first, so it reads the claims log from its plan's start, as an attempt with a group
 * does. OTHER: committed by another run on the pipeline's layout: that run's attempts may still
 * claim; read the claims log from the look-back (no group generation fences them). UNKNOWN:
 * nothing committed, an open transaction holding an offset, or a commit on format 1's layout
 * (UPGRADE): as OTHER, and in the shared topic too. */
#define SAME    1
#define OTHER   2
#define UNKNOWN 3
#ifdef UPGRADE
#define LEGACY_RUN(r) ((r) == 1)
#else
#define LEGACY_RUN(r) false
#endif
#if defined(MUTANT_RUN_START_FAST)
/* MUTANT: from the plan's start whatever run committed last. */
#define LAST_COMMIT(r) SAME
#elif defined(MUTANT_UPGRADE_PIPELINE_ONLY)
/* MUTANT: a commit on format 1's layout taken for another run's on the pipeline's. */
#define LAST_COMMIT(r) (!NO_PENDING -> OTHER : (Crun == (r) && !Clegacy -> SAME : OTHER))
#else
#define LAST_COMMIT(r) (!NO_PENDING -> UNKNOWN : (Clegacy -> UNKNOWN : (Crun == (r) -> SAME : OTHER)))
#endif
#if defined(SPLIT_LOG) && defined(CLAIM_FIRST) && !defined(PROGRESS)
#error "CLAIM_FIRST is how progress attempts run"
#endif

/* A progress group has no members: the broker takes any TxnOffsetCommit for it. */
#ifdef PROGRESS
#define MEMBER_OK(r) true
#else
#define MEMBER_OK(r) (member == (r))
#endif

/* ------------------------------------------------------------------ Kafka's state */

/* Per transactional id, what its transaction coordinator holds: the producer epoch (bumped by
 * every init_transactions on the id and by every timeout abort, KIP-360), whether a transaction is
 * open, the batch whose records it holds, and the group offset it holds pending for the input
 * partition (0 = none: a pending offset is an end offset, never 0). */
byte pe[MAXID];
bool open[MAXID];
byte txn_batch[MAXID];
byte pending[MAXID];

/* The group coordinator: the committed offset of the input partition, and which run's member id
 * the pipeline's static member (group.instance.id) currently has. A new run's driver joins with
 * the same instance id, which fences the old member id: TxnOffsetCommit with it is refused
 * (FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID; fencing layer 1). */
byte C = 0;
byte member = 1;

#if defined(SPLIT_LOG) && defined(PROGRESS)
/* A progress record's metadata: the run that committed C (C = 0 is batch 0's end, committed by run
 * 1), and whether on format 1's layout; per transactional id, what its pending offset would write. */
byte Crun = 1;
#ifdef UPGRADE
bool Clegacy = true;
#else
bool Clegacy = false;
#endif
byte txn_run[MAXID];
bool txn_legacy[MAXID];
#define RECORD_RUN(t) txn_run[t] = qrun; txn_legacy[t] = LEGACY_RUN(qrun)
#define COMMIT_RUN(t) Crun = txn_run[t]; Clegacy = txn_legacy[t]
#else
#define RECORD_RUN(t) skip
#define COMMIT_RUN(t) skip
#endif

#ifdef UPGRADE
/* Format 1's shared claims topic: run 1's plan record at offset 0, then claims and releases. */
byte shared[LOGMAX];
byte shared_end = 1;
#endif

/* The claims topic: one partition, appended with acks=all, so an append is atomic, gets the next
 * offset, and every later read sees it. Offset 0 holds batch 1's plan record of run 1. With
 * SPLIT_LOG this is the pipeline's claims log (claims and releases only), and `ctl` its control
 * log, whose offset 0 holds that plan record. */
byte claims[LOGMAX];
#ifdef SPLIT_LOG
byte claims_end = 0;
byte ctl[NA + 2];               /* two plan records, an ANNOUNCE per attempt that is not first */
byte ctl_end = 1;
#else
byte claims_end = 1;
#endif

/* What read_committed consumers see: how many attempts of batch b had their records made visible
 * by a commit (index 1, 2). */
byte visible[3];

/* Spark: batch 1's task reported success (the driver then plans and launches batch 2). */
bool batch1_done = false;

/* Per transactional id: its attempt died (CRASHES). Its transaction, if open, stays open until a
 * fence or the broker's timeout ends it. */
bool dead[MAXID];

/* C before the commit being checked; only the assertions read it, so it stays out of the state. */
hidden byte prevC;

/* Every transactional request is answered PRODUCER_FENCED unless the sender holds the id's
 * current epoch. */
#define CURRENT(t, my_pe) (pe[t] == (my_pe))

/* A stable OffsetFetch (require_stable) is answered UNSTABLE_OFFSET_COMMIT while any open
 * transaction holds a pending offset for the partition; the reader backs off and asks again. */
#define NO_PENDING (pending[1] == 0 && pending[2] == 0 && pending[3] == 0 && pending[4] == 0)

/* The coordinator ends transaction t (abort markers; or, from commit_txn, after applying it). */
inline end_txn(t) {
    open[t] = false;
    txn_batch[t] = 0;
    pending[t] = 0
}

/* init_transactions on id t, by an attempt's own producer or by a short-lived fencing producer:
 * the coordinator aborts whatever transaction the id has open and bumps the epoch, so that the
 * previous holder's later produce, sendOffsets and commit fail with PRODUCER_FENCED. A
 * transaction already in PREPARE_COMMIT is not aborted: the init waits until it completes. That
 * is the commit happening before this step, an interleaving the model has too. */
inline init_id(t) {
    if
    :: open[t] -> end_txn(t)
    :: else -> skip
    fi;
    pe[t]++
}

/* The invariants, asserted in the very step that changes C or visible[]. A commit is the only
 * step that changes them, so they hold in every reachable state, as a monitor would check. */
inline check_invariants() {
    assert(C >= prevC);                  /* the committed offset never moves back */
    assert(visible[1] <= 1);             /* batch 1's output visible at most once */
    assert(visible[2] <= 1);             /* batch 2's output visible at most once */
    assert(C < 1 || visible[1] == 1);    /* C at (or past) batch 1's end: exactly one batch-1 output */
    assert(C < 2 || visible[2] == 1);    /* C at batch 2's end: exactly one batch-2 output */
    assert(visible[1] == 0 || C >= 1);   /* batch 1's output visible: its offset committed */
    assert(visible[2] == 0 || C >= 2)    /* batch 2's output visible: its offset committed */
}

/* EndTxn(commit) accepted: atomically, the records become visible to read_committed consumers and
 * the pending offset becomes the group's committed offset. */
inline commit_txn(t) {
    prevC = C;
    if
    :: pending[t] > 0 -> C = pending[t]; COMMIT_RUN(t)
    :: else -> skip
    fi;
    visible[txn_batch[t]]++;
    end_txn(t);
    check_invariants()
}

/* ------------------------------------------------------------------ the broker's timeouts */

/* transaction.timeout.ms: the coordinator may abort an open transaction at any moment, bumping
 * the epoch (KIP-360), so its producer can no longer send offsets or commit. On in every
 * configuration. */
active proctype TransactionTimeouts() {
end:
    do
    :: atomic { open[1] -> end_txn(1); pe[1]++; printf("broker: transaction of t1 timed out: aborted, epoch %d\n", pe[1]) }
    :: atomic { open[2] -> end_txn(2); pe[2]++; printf("broker: transaction of t2 timed out: aborted, epoch %d\n", pe[2]) }
    :: atomic { open[3] -> end_txn(3); pe[3]++; printf("broker: transaction of t3 timed out: aborted, epoch %d\n", pe[3]) }
    :: atomic { open[4] -> end_txn(4); pe[4]++; printf("broker: transaction of t4 timed out: aborted, epoch %d\n", pe[4]) }
    od
}

/* ------------------------------------------------------------------ one attempt of a task */

/* A driver's plan record. With SPLIT_LOG it goes to the control log, and the plan's claims start
 * where the claims log ends once it is appended (the driver lists that end before it launches the
 * plan's tasks; a claim between the two requests is an older plan's, which this plan's attempts do
 * not read either way, as they do not read one just before the plan record). */
#ifdef SPLIT_LOG
#define APPEND_PLAN() ctl_from = ctl_end; ctl[ctl_end] = ENTRY(PLAN, qrun, 0); ctl_end++; from = claims_end
#else
#define APPEND_PLAN() from = claims_end; claims[from] = ENTRY(PLAN, 0, 0); claims_end++
#endif

/* Step 4 on one log: read it from `start` up to and including `last` (the attempt's claim there).
 * Every record below it was acknowledged before it was assigned, so what it reads is fixed: one
 * step, however many fetches. A CLAIM with a higher epoch: this attempt is stale. A CLAIM with a
 * lower epoch under another transactional id and no RELEASE of it (a RELEASE comes after its
 * CLAIM): that attempt may still commit, its id is to be fenced. A CLAIM of another run is
 * neither: the plan offsets of two runs need not follow the order in which they joined the group.
 * `w`: 0 for the claims log, 1 for format 1's shared topic (UPGRADE). */
#ifdef UPGRADE
#define LOG_AT(w, k) ((w) == 0 -> claims[k] : shared[k])
#else
#define LOG_AT(w, k) claims[k]
#endif
inline scan_claims(w, start, last) {
    if
    :: d_step {
           i = start;
           do
           :: i > last -> break
           :: else ->
               if
               :: KIND(LOG_AT(w, i)) == CLAIM && SAME_RUN(EPOCH(LOG_AT(w, i)), qrun) && EPOCH(LOG_AT(w, i)) > me ->
                   stale = true
               :: KIND(LOG_AT(w, i)) == CLAIM && SAME_RUN(EPOCH(LOG_AT(w, i)), qrun) && EPOCH(LOG_AT(w, i)) < me &&
                  TXNID(LOG_AT(w, i)) != id ->
                   j = start;
                   do
                   :: j > last -> fence = fence | (1 << TXNID(LOG_AT(w, i))); break
                   :: j <= last && LOG_AT(w, j) == ENTRY(RELEASE, EPOCH(LOG_AT(w, i)), TXNID(LOG_AT(w, i))) -> break
                   :: else -> j++
                   od
               :: else -> skip
               fi;
               i++
           od;
           i = 0; j = 0;
           if
           :: w == 0 ->
               printf("A%d: read claims %d..%d: stale=%d, ids to fence (bit mask)=%d\n", me, start, last, stale, fence)
           :: else ->
               printf("A%d: read the shared topic %d..%d: stale=%d, ids to fence (bit mask)=%d\n", me, start, last,
                      stale, fence)
           fi
       }
    :: goto failed
    fi
}

/* SPLIT_LOG, step 4a: read the control log from the plan record to its end (one step: what lies
 * below the end it lists is fixed). An ANNOUNCE of another attempt of its run: `announced`. */
inline read_control() {
    if
    :: d_step {
           i = ctl_from;
           do
           :: i >= ctl_end -> break
           :: else ->
               if
               :: KIND(ctl[i]) == ANNOUNCE && SAME_RUN(EPOCH(ctl[i]), qrun) && EPOCH(ctl[i]) != me ->
                   announced = true
               :: else -> skip
               fi;
               i++
           od;
           i = 0;
           printf("A%d: read the control log %d..%d: announced=%d\n", me, ctl_from, ctl_end - 1, announced)
       }
    :: goto failed
    fi
}

#ifdef EARLY_STABLE_READ
#define FENCED_SOME fenced_some = true
#else
#define FENCED_SOME skip
#endif

/* CRASHES: the attempt may die here, for good, leaving whatever it had open. */
#ifdef CRASHES
#define CRASH_POINT if :: skip :: atomic { dead[id] = true; goto crashed } fi
#else
#define CRASH_POINT skip
#endif

/* An attempt of batch `batch`'s task in run `qrun` of the query, with attempt epoch `me` and its producer's
 * transactional id `id`. The epoch is (plan's claims offset, taskAttemptId): later attempts of a
 * plan, later batches and later runs have larger epochs; the model numbers attempts in that
 * order. Besides the failures Kafka reports, any request may fail for reasons of its own
 * (timeouts, Spark killing a speculative copy, a record refused): the bare `goto failed` choices. */
proctype Attempt(byte me; byte id; byte batch; byte qrun) {
    byte my_pe;          /* the producer epoch its init_transactions got */
    byte from;           /* where its plan's claims start (its plan record) */
    byte ctl_from;       /* SPLIT_LOG: its plan record in the control log */
    bool announced;      /* SPLIT_LOG: an ANNOUNCE of its task was read in the control log */
    byte known;          /* SPLIT_LOG with PROGRESS: SAME, OTHER or UNKNOWN (LAST_COMMIT) */
    byte so;             /* UPGRADE: offset of its CLAIM in the shared topic */
    bool sclaimed;       /* UPGRADE: that CLAIM is there and not released */
    bool sread;          /* UPGRADE: it reads the shared topic up to so */
    byte o;              /* offset of its CLAIM */
    bool claimed;        /* its CLAIM is in the topic and not released */
    byte fence;          /* bit t set: transactional id t is to be fenced before going on */
    bool stale;          /* a CLAIM with a higher epoch was read: this attempt is a zombie */
    bool fenced_some;    /* EARLY_STABLE_READ: it fenced an id (4b) */
    byte seen;           /* the group's committed offset, as read */
    byte i, j;           /* loop counters of the claims scan (reset after it) */

    if
    :: batch == 2 ->
        /* Spark launches batch 2's task once batch 1's task succeeded, after the driver planned
         * batch 2 (one append of its plan record). Waiting here for ever is no deadlock: batch 1
         * may have failed, and Spark would then run more attempts of it. */
end_unplanned:
        atomic { batch1_done -> APPEND_PLAN();
                 printf("driver: batch 1 done; batch 2 planned at claims offset %d\n", from) }
    :: qrun == 2 ->
        /* A new run of the query (the driver was restarted) replays batch 1. Its driver joins the
         * group as the same static member (the old run's member id is fenced), then plans batch
         * 1 anew: a plan record later than every claim before it. Run 1's attempts launched
         * before may still be running. */
#ifndef PROGRESS
        atomic { member = 2; printf("driver of run 2: joined the group, run 1's member id is fenced\n") }
#endif
        atomic { APPEND_PLAN();
                 printf("driver of run 2: batch 1 planned again at claims offset %d\n", from) }
#if defined(PROGRESS) && !defined(MUTANT_NO_LOOKBACK) && !defined(SPLIT_LOG)
        /* A progress plan's attempts read back one transaction timeout (and a margin) before it:
         * every claim of run 1 whose transaction may still be open, here all of them. (MUTANT:
         * from its own plan record only, as a plan of input offsets reads.) With SPLIT_LOG each
         * attempt decides that itself (LAST_COMMIT). */
        from = 0;
#endif
    :: else -> from = 0
    fi;

    /* 1. init_transactions on its own id (aborts what the id had open, bumps its epoch), then
     * begin (local). The real sink keeps a worker's producer across tasks, so this init may have
     * happened long before; it still precedes this attempt's produce, and the model lets it
     * happen at any moment before that. */
    atomic {
        init_id(id);
        my_pe = pe[id];
        printf("A%d (batch %d, run %d): init_transactions on t%d -> epoch %d\n", me, batch, qrun, id, my_pe)
    }

#ifndef CLAIM_FIRST
    goto produce;
claimed_and_produced:
#else
    goto claim;
#endif
    goto after_claims;

produce:
    /* 2. Produce the task's records: AddPartitionsToTxn opens the transaction (its timeout
     * starts), the records are written in it. One step: between those two requests only a
     * timeout could act, the same as one just after. */
    if
    :: atomic {
           if
           :: CURRENT(id, my_pe) -> open[id] = true; txn_batch[id] = batch;
                printf("A%d: produced its records in a transaction of t%d\n", me, id)
           :: else -> printf("A%d: produce: PRODUCER_FENCED\n", me); goto failed
           fi
       }
    :: goto failed
    fi;
    CRASH_POINT;
#ifdef CLAIM_FIRST
    goto after_claims;
#else
    goto claim;
#endif

claim:
#ifndef NO_CLAIMS
#if defined(SPLIT_LOG) && defined(PROGRESS)
#ifdef UPGRADE
    if
    :: LEGACY_RUN(qrun) -> goto legacy_claim
    :: else -> skip
    fi;
#endif
    /* 0. Read the task's last committed progress, without waiting for an open transaction. */
    atomic {
        known = LAST_COMMIT(qrun);
        printf("A%d: last commit by run %d (format 1: %d, settled: %d): SAME/OTHER/UNKNOWN = %d\n", me, Crun,
               Clegacy, NO_PENDING, known)
    }
#endif
#ifdef SPLIT_LOG
    /* 3a. An attempt that is not the first of its plan appends ANNOUNCE to the control log (acks=all)
     * before its claim: a first attempt whose claim lands earlier then finds it in the control
     * log, or this attempt's read of the claims log finds that first attempt's claim. (PROGRESS:
     * no attempt is first, so none announces.) */
    if
    :: !ANNOUNCES(me) -> skip
#ifdef MUTANT_NO_ANNOUNCE
    :: else -> skip      /* MUTANT: retries do not announce themselves */
#else
    :: else ->
        if
        :: atomic { ctl[ctl_end] = ENTRY(ANNOUNCE, me, id); ctl_end++;
                    printf("A%d: ANNOUNCE(epoch %d, t%d) at control offset %d\n", me, me, id, ctl_end - 1) }
        :: goto failed
        fi
#endif
    fi;
#ifdef MUTANT_CONTROL_BEFORE_CLAIM
    if
    :: FIRST_OF_PLAN(me) -> read_control()    /* MUTANT: the control log read before the claim */
    :: else -> skip
    fi;
#endif
#endif
    /* 3. Append CLAIM(epoch, transactional id) to the claims topic (acks=all), learn its offset o. */
    if
    :: atomic {
           o = claims_end; claims[o] = ENTRY(CLAIM, me, id); claims_end++; claimed = true;
           printf("A%d: CLAIM(epoch %d, t%d) at claims offset %d\n", me, me, id, o)
       }
    :: goto failed
    fi;
    CRASH_POINT;
#ifdef UPGRADE
    /* 3d. UNKNOWN: a claim in the shared topic as well, where format 1's attempts claim, so that one
     * of them that claims later finds it (MUTANT: the shared topic read below without it). */
    if
    :: known == UNKNOWN ->
#ifdef MUTANT_SHARED_UNCLAIMED
        so = shared_end - 1; sread = true
#else
        if
        :: atomic { so = shared_end; shared[so] = ENTRY(CLAIM, me, id); shared_end++; sclaimed = true; sread = true;
                    printf("A%d: CLAIM(epoch %d, t%d) at shared offset %d\n", me, me, id, so) }
        :: goto failed
        fi;
        CRASH_POINT
#endif
    :: else -> skip
    fi;
#endif
#if defined(MUTANT_EARLY_STABLE_READ) || defined(EARLY_STABLE_READ)
    /* Step 5, the stable read, sent as soon as the claim is acknowledged, beside the claims read (4)
     * and the fences (4b); its answer is used (6) once those are done. MUTANT: always;
     * EARLY_STABLE_READ: read again after the fences when it fenced an id. */
    if
    :: atomic { NO_PENDING -> seen = C; printf("A%d: stable read (beside the claims read): C = %d\n", me, seen) }
    :: goto failed
    fi;
#endif

#ifdef SPLIT_LOG
    /* 4a. The first attempt of its plan reads the control log from its plan record to its end, as
     * listed after its claim was acknowledged (one step: what lies below that end is fixed). An
     * ANNOUNCE of an attempt of its run other than itself: read the claims log as well (step 4).
     * Nothing: no other attempt of its task claimed before it, and any that claims later reads
     * its claim; it goes on without reading the claims log. */
    if
    :: !FIRST_OF_PLAN(me) -> goto claims_scan
    :: else -> skip
    fi;
#ifndef MUTANT_CONTROL_BEFORE_CLAIM
    read_control();
#endif
    if
    :: announced -> announced = false    /* read the claims log as well */
    :: else -> goto fenced               /* no other attempt to refuse for or to fence */
    fi;
claims_scan:
#endif

    /* 4. Read the claims from its plan's record (progress attempts not SAME: from the look-back) up
     * to and including o (scan_claims). */
#if defined(SPLIT_LOG) && defined(PROGRESS)
    if
    :: known != SAME -> from = 0
    :: else -> skip
    fi;
#endif
    scan_claims(0, from, o);
#ifdef UPGRADE
    if
    :: sread -> scan_claims(1, 0, so)  /* 4d. the shared topic from the look-back */
    :: else -> skip
    fi;
scanned:
#endif
#ifdef MUTANT_NO_STALE
    stale = false;       /* MUTANT: a stale attempt goes on */
#endif
    if
    :: stale -> printf("A%d: a newer attempt claimed the input: refuses (StaleAttemptError)\n", me); goto failed
    :: else -> skip
    fi;

    /* 4b. Fence each of those ids, one init_transactions each (a short-lived producer), in any
     * order. If one fails, so does the attempt: it cannot show that the older attempt is fenced. */
#ifdef MUTANT_NO_FENCE
    fence = 0;           /* MUTANT: older unreleased claims are not fenced */
#endif
    do
    :: fence == 0 -> break
    :: atomic { fence & 2  -> init_id(1); fence = fence ^ 2; FENCED_SOME;  printf("A%d: fenced t1 -> epoch %d\n", me, pe[1]) }
    :: atomic { fence & 4  -> init_id(2); fence = fence ^ 4; FENCED_SOME;  printf("A%d: fenced t2 -> epoch %d\n", me, pe[2]) }
    :: atomic { fence & 8  -> init_id(3); fence = fence ^ 8; FENCED_SOME;  printf("A%d: fenced t3 -> epoch %d\n", me, pe[3]) }
    :: atomic { fence & 16 -> init_id(4); fence = fence ^ 16; FENCED_SOME; printf("A%d: fenced t4 -> epoch %d\n", me, pe[4]) }
    :: fence != 0 -> fence = 0; goto failed
    od;
#ifdef SPLIT_LOG
fenced:
#endif
    CRASH_POINT;
#endif
#ifdef CLAIM_FIRST
    goto produce;
#else
    goto claimed_and_produced;
#endif

#ifdef UPGRADE
legacy_claim:
    /* Run 1 is format 1's: it claims in the shared topic and reads it from the look-back. */
    if
    :: atomic { so = shared_end; shared[so] = ENTRY(CLAIM, me, id); shared_end++; sclaimed = true;
                printf("A%d: CLAIM(epoch %d, t%d) at shared offset %d\n", me, me, id, so) }
    :: goto failed
    fi;
    CRASH_POINT;
    scan_claims(1, 0, so);
    goto scanned;
#endif

after_claims:

    /* 5. Stable read of the group's committed offset: waits while an open transaction holds a
     * pending offset for the partition (its own cannot: it sends offsets later). */
#if defined(EARLY_STABLE_READ)
    if
    :: !fenced_some -> goto decide
    :: else -> fenced_some = false
    fi;
#endif
#ifndef MUTANT_EARLY_STABLE_READ
    if
#ifdef MUTANT_UNSTABLE_READ
    :: atomic { seen = C; printf("A%d: read (not stable): C = %d\n", me, seen) }   /* MUTANT: no waiting */
#else
    :: atomic { NO_PENDING -> seen = C; printf("A%d: stable read: C = %d\n", me, seen) }
#endif
    :: goto failed       /* stableOffsetsTimeoutMs, or the task killed while it backs off */
    fi;
    CRASH_POINT;
#endif

decide:
    /* 6. The replay check. C == e: another attempt (or run) committed this batch: abort, succeed
     * without writing. C == s: go on. Anything else is a gap or an overlap: fail. */
    if
    :: seen == batch ->
        seen = 0;
        atomic {
            if
            :: CURRENT(id, my_pe) && open[id] -> end_txn(id)
            :: else -> skip
            fi;
            printf("A%d: already committed: aborts, succeeds without writing\n", me)
        }
        goto succeeded
    :: seen == batch - 1 -> seen = 0
    :: else -> seen = 0; printf("A%d: C is neither s nor e: OffsetMismatchError\n", me); goto failed
    fi;

#ifdef MUTANT_EARLY_RELEASE
    /* MUTANT: the attempt releases its claim once it has decided to commit, before its
     * transaction has ended. */
    if
    :: claimed ->
        atomic { claims[claims_end] = ENTRY(RELEASE, me, id); claims_end++; claimed = false;
                 printf("A%d: RELEASE(epoch %d, t%d) at claims offset %d, before committing\n", me, me, id, claims_end - 1) }
    :: true
    fi;
#endif

    /* 7. sendOffsetsToTransaction(e) with the plan's group metadata: the transaction now holds e
     * pending. Refused if the producer is fenced, or if the plan's member id is (layer 1). */
    if
    :: atomic {
           if
#ifdef MUTANT_NO_MEMBER_CHECK
           :: CURRENT(id, my_pe) ->     /* MUTANT: the broker takes any member's offsets */
#else
           :: CURRENT(id, my_pe) && MEMBER_OK(qrun) ->
#endif
                pending[id] = batch; RECORD_RUN(id); printf("A%d: sent offset %d to its transaction\n", me, batch)
           :: !CURRENT(id, my_pe) -> printf("A%d: send offsets: PRODUCER_FENCED\n", me); goto failed
           :: else -> printf("A%d: send offsets: FENCED_INSTANCE_ID (a newer run owns the group)\n", me); goto failed
           fi
       }
    :: goto failed
    fi;
    CRASH_POINT;

#ifdef RELEASE_IN_FLIGHT
    /* Variant: commit_transaction times out at the client and the task gives up, believing its
     * transaction over, while the EndTxn(commit) request is still on its way: the RELEASE lands
     * before the commit does. (The offsets are pending by now, so other attempts' stable reads
     * wait for this commit.) */
    if
    :: claimed ->
        atomic { claims[claims_end] = ENTRY(RELEASE, me, id); claims_end++; claimed = false;
                 printf("A%d: commit timed out; RELEASE(epoch %d, t%d) at claims offset %d; the commit is in flight\n",
                        me, me, id, claims_end - 1) }
    :: true              /* or it waits for the commit's answer */
    fi;
#endif

    /* 8. commit_transaction: atomically records visible and C := e; or PRODUCER_FENCED, since a
     * fence or a timeout that aborted its transaction also bumped the epoch. */
    if
    :: atomic {
           if
           :: CURRENT(id, my_pe) ->
                printf("A%d: COMMITTED: batch %d output visible, C = %d\n", me, batch, pending[id]);
                commit_txn(id)
           :: else -> printf("A%d: commit: PRODUCER_FENCED\n", me); goto failed
           fi
       }
    :: goto failed
    fi;

    /* The commit's answer can be lost (and a retry of it finds the epoch bumped by a fence): the
     * task fails although its transaction committed. Its RELEASE is still right: it has ended. */
    if
    :: goto succeeded
    :: printf("A%d: the commit's answer was lost: the task fails\n", me); goto failed
    fi;

succeeded:
    if
    :: batch == 1 && qrun == 1 -> batch1_done = true
    :: else -> skip
    fi;
#ifdef CRASHES
    /* The newest attempt is done: no dead attempt's transaction may still hold readers back. */
    assert(me != NA || !(dead[1] && open[1] || dead[2] && open[2] || dead[3] && open[3] || dead[4] && open[4]));
#endif
    goto release;        /* the real sink releases after a success too */

failed:
    /* Abort if the producer still can. If it is fenced, whoever bumped the epoch (a fence, a
     * timeout) aborted what it had open. Either way the transaction has ended, and only then may
     * a RELEASE follow. An abort that times out leaves the transaction perhaps open: the attempt
     * must not release then, which is an attempt that stops here. */
    fence = 0; stale = false;
    atomic {
        if
        :: CURRENT(id, my_pe) && open[id] -> end_txn(id); printf("A%d: aborted its transaction\n", me)
        :: else -> printf("A%d: fails; it has no open transaction\n", me)
        fi
    }

release:
    /* Appended last, so a RELEASE that is lost or never sent is an attempt that stops before it. */
    if
    :: claimed ->
        atomic {
            claims[claims_end] = ENTRY(RELEASE, me, id); claims_end++; claimed = false;
            printf("A%d: RELEASE(epoch %d, t%d) at claims offset %d\n", me, me, id, claims_end - 1)
        }
    :: else -> skip
    fi;
#ifdef UPGRADE
    if
    :: sclaimed ->
        atomic {
            shared[shared_end] = ENTRY(RELEASE, me, id); shared_end++; sclaimed = false;
            printf("A%d: RELEASE(epoch %d, t%d) at shared offset %d\n", me, me, id, shared_end - 1)
        }
    :: else -> skip
    fi;
#endif
#ifdef CRASHES
    goto done;
crashed:
    printf("A%d: dies (no abort, no release)\n", me);
done:
    skip
#endif
}

init {
    atomic {
        claims[0] = ENTRY(PLAN, 0, 0);
#ifdef UPGRADE
        shared[0] = ENTRY(PLAN, 0, 0);
#endif
        run Attempt(1, 1, 1, 1);
#if ATTEMPTS >= 2
#ifdef REUSE_ID
        run Attempt(2, 1, 1, 1);     /* took over attempt 1's executor slot, so its transactional id */
#else
        run Attempt(2, 2, 1, 1);
#endif
#endif
#if ATTEMPTS >= 3
        run Attempt(3, 3, 1, 1);
#endif
#ifdef BATCH2
        run Attempt(NA, NA, 2, 1);
#endif
#ifdef RESTART
        run Attempt(NA, NA, 1, 2);
#endif
    }
}
