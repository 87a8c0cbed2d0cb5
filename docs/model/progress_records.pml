/*
 * progress_records.pml: the progress records protocol, in Promela.
 *
 * A write task without input offsets to commit (a stream without a consumer group, any replayable
 * source, foreachBatch, an idempotent batch write with txnAppId/txnVersion) commits, in ONE Kafka
 * transaction with its records, its progress record: the offset `version + 1` of a group of its
 * own, which has no members (sink/task_progress.py). Here the group's offset is P = the version
 * last committed (0: none). Each attempt of the task:
 *
 *   lease          leases a write slot of its host (a lock file; a slot's id is its
 *                  transactional id)
 *   init           init_transactions on the slot's id (the producer of the slot), and records in
 *                  the lock file that its producer was made, after its plan record
 *   reading_start  reads the plan under which the task last committed (not stable) and starts
 *                  reading claims at the earlier of its own plan and max(the look-back, that plan)
 *   claim          appends its claim (acks=all) BEFORE its transaction opens (claims first)
 *   decide_fence   reads the claims from there to its own: a newer claim -> refuse; per other
 *                  transactional id, the newest unreleased older claim not taken over -> fence
 *   holder_fenced  per id to fence, reads the slot's holder from its host's lock file: a holder
 *                  whose producer was made, and that took the slot over from the claim's process
 *                  or was initialized after the claim, has fenced it already -> skip; else
 *                  init_transactions on the id (fence)
 *   produce        the first record opens the transaction
 *   read           stable read of P (waits while an open transaction holds a pending offset)
 *   decide_progress_commit  P < version: commit; P == version: already written, skip; P >
 *                  version: a stream's stale attempt refuses, a batch write's older version is
 *                  skipped (as Delta)
 *   send           sendOffsetsToTransaction(version), accepted with the id's current epoch
 *   commit         EndTxn: the records visible and P = version, at once
 *   release        a release of its claim; the slot's lock freed
 *
 * Configuration (spin -a -DNAME progress_records.pml; docs/model/check.py runs them all):
 *   RETRY         two attempts of version 1 in one run (a retry, a speculative copy)
 *   RESTART       an attempt of run 1, and one of run 2 that replays version 1 (a restarted driver,
 *                 a new application: a plan record later than every claim of run 1)
 *   RESTART_RETRY RESTART and a second attempt of run 2
 *   NEXT_VERSION  two attempts of version 1, and version 2's attempt launched once version 1's
 *                 task succeeded: a version-1 zombie must not write after version 2
 *   VERSIONED     an idempotent batch write: version 1, version 2 once 1 succeeded, and a rerun of
 *                 version 1 in a third run; an older version than the last committed is skipped
 *   EXECUTOR_IDS  the naming before host slots: a transactional id named an executor's slot, and
 *                 executor ids repeat across applications, so processes of two applications can
 *                 hold one id at once, and each application's lock files are its own. The log
 *                 starts with an unreleased claim of a dead run-1 attempt under id 0; run 2's attempt
 *                 and run 3's attempt, and another task of run 3 holding slot 0 there.
 *   OTHER_TASK    another task of run 1 leases a slot of the same host (any free one, also a dead
 *                 attempt's) and makes its producer there
 *   CRASHES       an attempt may die after any step from its lease on (SIGKILL, its driver killed
 *                 with it): no abort, no release; its slot's lock is freed (the kernel's flock).
 *                 Checked: when the newest attempt succeeds, no dead attempt's transaction is open.
 *   NO_CLAIMS     no claim, no read of the claims, no fence: the stable read and the decision alone
 *   MUTANT_*      the protocol with one mistake (see each #ifdef): the checker must find it
 *
 * Invariants, asserted in the step that changes the state: each version's records visible at most
 * once; P never moves back; a version is written only while P is below it (a stale version is never
 * written); P at a version exactly when that version's records are visible; an attempt that
 * succeeds for version v leaves v's records visible (or, for a batch write, a later version).
 *
 * Granularity as attempt_fencing.pml: each atomic block is ONE Kafka request or one local file
 * operation (a lock file read or written), with the decision taken on its answer.
 */

#define NONE 255
#define NSLOT 3                 /* slots of a host: transactional ids 0..2 */
#define NPROC 8                 /* process numbers: attempts 1..4, the other task's holder 7 */
#define HOLDER_ME 7
#define LOGMAX 12

#if defined(RETRY) + defined(RESTART) + defined(RESTART_RETRY) + defined(NEXT_VERSION) + defined(VERSIONED) + defined(EXECUTOR_IDS) != 1
#error "choose one scenario: RETRY, RESTART, RESTART_RETRY, NEXT_VERSION, VERSIONED or EXECUTOR_IDS"
#endif

/* The newest attempt of the scenario (its success ends the CRASHES check). */
#if defined(RETRY) || defined(RESTART)
#define NEWEST 2
#else
#define NEWEST 3
#endif

/* Whose lock files an attempt of run r sees: its host's (one set for every application), or with
 * EXECUTOR_IDS its own application's. */
#ifdef EXECUTOR_IDS
#define NS(r) (r)
#else
#define NS(r) 0
#endif

/* Claims log records: kind, attempt (its order: later plans and later attempts of a plan are
 * numbered higher), the lock files' namespace of its slots (the claim's `slots`), its slot (its
 * transactional id). A plan record holds nothing else. */
#define CLAIM   1
#define RELEASE 2
#define PLAN    3
#define ENTRY(kind, me, ns, slot) ((kind) * 256 + (me) * 16 + (ns) * 4 + (slot))
#define KIND(x) ((x) / 256)
#define WHO(x)  (((x) / 16) % 16)
#define SLOTS(x) (((x) / 4) % 4)
#define TXNID(x) ((x) % 4)

/* ------------------------------------------------------------------ Kafka's state */

byte pe[NSLOT];                 /* per transactional id: the producer epoch */
bool open[NSLOT];               /* a transaction is open */
byte txn_ver[NSLOT];            /* the version whose records it holds (0: none, another task's) */
byte pending[NSLOT];            /* the progress offset it holds pending (0: none) */
byte opener[NSLOT];             /* the attempt that opened it */

byte P = 0;                     /* the progress group's committed version */
byte Pplan = 0;                 /* the plan record the committing attempt ran under (its metadata) */
byte visible[3];                /* how many attempts of version v had their records made visible */

short log[LOGMAX];              /* the claims topic's partition (acks=all: an append is atomic) */
byte log_end = 1;
byte plan_at[4];                /* the offset of plan 1..3's record (NONE: not appended yet) */

/* The host: per namespace and slot, the lock (the process holding it, 0: free) and what the lock
 * file says: the holder's token, whether its producer is being made, and the plan record its
 * producer was initialized after. */
byte lock[4 * NSLOT];
byte tok[4 * NSLOT];
bool pend[4 * NSLOT];
byte after[4 * NSLOT];
bool made[4 * NSLOT];           /* its producer was made (recorded after its init_transactions returned) */
#define L(ns, s) ((ns) * NSLOT + (s))

bool dead[NPROC];
bool v1_done = false;           /* Spark: version 1's task succeeded (version 2 is then launched) */
hidden byte prevP;

#define CURRENT(t, my_pe) (pe[t] == (my_pe))
#define NO_PENDING (pending[0] == 0 && pending[1] == 0 && pending[2] == 0)

inline end_txn(t) {
    open[t] = false; txn_ver[t] = 0; pending[t] = 0; opener[t] = 0
}

/* init_transactions on id t: aborts what it has open, bumps the epoch (the previous holder's later
 * requests are answered PRODUCER_FENCED). */
inline init_id(t) {
    if
    :: open[t] -> end_txn(t)
    :: else -> skip
    fi;
    pe[t]++
}

inline check_invariants(v) {
    assert(visible[1] <= 1 && visible[2] <= 1);        /* no record twice */
    assert(P >= prevP);                                /* the progress never moves back */
    assert(prevP < v);                                 /* a stale version is never written */
    assert(P != 1 || visible[1] == 1);                 /* P at a version: its records visible */
    assert(P != 2 || visible[2] == 1)
}

inline commit_txn(t) {
    prevP = P;
    if
    :: pending[t] > 0 -> P = pending[t]; Pplan = plan_at[pl]
    :: else -> skip
    fi;
    visible[txn_ver[t]]++;
    check_invariants(txn_ver[t]);
    end_txn(t)
}

/* ------------------------------------------------------------------ the broker's timeouts */

active proctype TransactionTimeouts() {
end:
    do
    :: atomic { open[0] -> end_txn(0); pe[0]++; printf("broker: transaction of t0 timed out: aborted\n") }
    :: atomic { open[1] -> end_txn(1); pe[1]++; printf("broker: transaction of t1 timed out: aborted\n") }
    :: atomic { open[2] -> end_txn(2); pe[2]++; printf("broker: transaction of t2 timed out: aborted\n") }
    od
}

#ifdef CRASHES
/* The process dies here: its locks are freed by the kernel; nothing else it had is ended. */
#define CRASH_POINT if :: skip :: atomic { dead[me] = true; free_locks(); goto crashed } fi
#else
#define CRASH_POINT skip
#endif

inline free_locks() {
    for (i : 0 .. 4 * NSLOT - 1) {
        if
        :: lock[i] == me -> lock[i] = 0
        :: else -> skip
        fi
    }
    i = 0
}

/* lease: the first free slot of its namespace (a slot whose holder died is free), its lock file
 * rewritten with its token and "producer being made". */
inline lease() {
    atomic {
        if
        :: lock[L(ns, 0)] == 0 -> s = 0
        :: lock[L(ns, 1)] == 0 -> s = 1
        :: lock[L(ns, 2)] == 0 -> s = 2
        fi;
        lock[L(ns, s)] = me; tok[L(ns, s)] = me; pend[L(ns, s)] = true; after[L(ns, s)] = NONE;
        made[L(ns, s)] = false;
        if
        :: me == HOLDER_ME -> printf("H (another task, run %d): leased slot %d (transactional id t%d)\n", qrun, s, s)
        :: else -> printf("A%d: leased slot %d (transactional id t%d)\n", me, s, s)
        fi
    }
}

/* init, then the producer recorded: initialized after its plan record. A failed init records no
 * producer (no one waits for it). */
inline init_and_record() {
    if
    :: atomic { init_id(s); my_pe = pe[s]; printf("A%d: init_transactions on t%d\n", me, s) }
    :: atomic { pend[L(ns, s)] = false; printf("A%d: init_transactions failed\n", me) }; goto failed
    fi;
    CRASH_POINT;
    atomic { pend[L(ns, s)] = false; after[L(ns, s)] = plan_at[pl]; made[L(ns, s)] = true;
             printf("A%d: recorded its producer, initialized after plan record %d\n", me, plan_at[pl]) }
}

/* ------------------------------------------------------------------ one attempt */

proctype Attempt(byte me; byte qrun; byte ver; byte pl; bool appends) {
    byte ns = NS(qrun);
    byte s;                      /* its slot: its transactional id */
    byte my_pe = NONE;
    byte from;                   /* where it reads claims from (since) */
    byte o = NONE;               /* its claim's offset */
    bool stale;
    byte zo[NSLOT];              /* per id: the offset of the claim to fence (NONE: none) */
    byte t;                      /* the id being fenced */
    byte htok, hafter;           /* the holder the lock file names, and its producer's plan record */
    bool hmade;                  /* the lock file says the holder's producer was made */
    bool locked;                 /* it locked a free slot to read its holder */
    byte seen;
    byte i, j, k;

    /* The plan: the driver appends its record before launching the plan's tasks. */
    if
    :: appends ->
end_unlaunched:
        atomic { (pl == 1 || plan_at[pl - 1] != NONE) && (ver == 1 || v1_done) ->
                 plan_at[pl] = log_end; log[log_end] = ENTRY(PLAN, 0, 0, 0); log_end++;
                 printf("driver of run %d: version %d planned at claims offset %d\n", qrun, ver, plan_at[pl]) }
    :: else ->
end_unplanned:
        plan_at[pl] != NONE
    fi;

    lease();
    CRASH_POINT;
    init_and_record();
    zo[0] = NONE; zo[1] = NONE; zo[2] = NONE;

    /* reading_start: the plan under which the task last committed, read without waiting. */
    atomic {
#ifdef MUTANT_NO_LOOKBACK
        from = plan_at[pl];      /* MUTANT: from its own plan record, as a plan of input offsets */
#else
        from = 0;                /* the look-back: every claim whose transaction may be open */
#endif
        if
        :: Pplan > from -> from = Pplan
        :: else -> skip
        fi;
        if
        :: from > plan_at[pl] -> from = plan_at[pl]
        :: else -> skip
        fi;
        printf("A%d (version %d, run %d): reads claims from %d\n", me, ver, qrun, from)
    }

#ifdef NO_CLAIMS
    goto fenced;                 /* the stable read and the commit decision alone */
#endif
    /* claim */
    if
    :: atomic { o = log_end; log[o] = ENTRY(CLAIM, me, ns, s); log_end++;
                printf("A%d: CLAIM(A%d, slots %d, t%d) at %d\n", me, me, ns, s, o) }
    :: goto failed
    fi;
    CRASH_POINT;

    /* decide_fence: one read of from..o */
    if
    :: d_step {
           for (i : from .. o) {
               if
               :: KIND(log[i]) == CLAIM && WHO(log[i]) > me -> stale = true
               :: KIND(log[i]) == CLAIM && WHO(log[i]) < me && TXNID(log[i]) != s ->
                   k = 1;                                   /* unreleased and not taken over */
                   for (j : from .. o) {
                       if
                       :: log[j] == ENTRY(RELEASE, WHO(log[i]), SLOTS(log[i]), TXNID(log[i])) -> k = 0
                       :: j > i && KIND(log[j]) == CLAIM && TXNID(log[j]) == TXNID(log[i]) &&
                          SLOTS(log[j]) == SLOTS(log[i]) && WHO(log[j]) != WHO(log[i]) -> k = 0
                       :: else -> skip
                       fi
                   }
                   if
#ifdef MUTANT_OLDEST_CLAIM
                   :: k && zo[TXNID(log[i])] == NONE -> zo[TXNID(log[i])] = i   /* MUTANT: an id's oldest claim */
#else
                   :: k -> zo[TXNID(log[i])] = i                                 /* an id's newest claim */
#endif
                   :: else -> skip
                   fi
               :: else -> skip
               fi
           }
           i = 0; j = 0; k = 0;
           printf("A%d: read claims %d..%d: stale=%d, to fence: t0@%d t1@%d t2@%d\n", me, from, o, stale, zo[0], zo[1], zo[2]);
           from = 0
       }
    :: goto failed
    fi;
    if
    :: stale -> printf("A%d: a newer attempt claimed: refuses (StaleAttemptError)\n", me); goto failed
    :: else -> skip
    fi;

    /* holder_fenced, and fence: per id, in any order */
fence_next:
    if
    :: zo[0] == NONE && zo[1] == NONE && zo[2] == NONE -> goto fenced
    :: zo[0] != NONE -> t = 0
    :: zo[1] != NONE -> t = 1
    :: zo[2] != NONE -> t = 2
    fi;
    /* current_holder: the lock file of t's slot in its host's slots. A free slot is locked while
     * the attempt acts, so that nobody takes it over meanwhile. (It waits while a live holder's
     * producer is being made, up to PRODUCER_READY_WAIT_S: the model lets it read at any moment,
     * as if that wait had passed.) */
    atomic {
        if
        :: lock[L(ns, t)] == 0 -> lock[L(ns, t)] = me; locked = true
        :: else -> skip
        fi;
        htok = tok[L(ns, t)]; hafter = (pend[L(ns, t)] -> NONE : after[L(ns, t)]); hmade = made[L(ns, t)];
        if
        :: hafter == NONE && htok == HOLDER_ME -> printf("A%d: the lock file of t%d names H, no producer made\n", me, t)
        :: hafter == NONE && htok != HOLDER_ME -> printf("A%d: the lock file of t%d names A%d, no producer made\n", me, t, htok)
        :: hafter != NONE && htok == HOLDER_ME -> printf("A%d: the lock file of t%d names H, initialized after %d\n", me, t, hafter)
        :: hafter != NONE && htok != HOLDER_ME -> printf("A%d: the lock file of t%d names A%d, initialized after %d\n", me, t, htok, hafter)
        fi
    }
    if
#ifndef MUTANT_NO_HOLDER_CHECK
#ifdef MUTANT_TAKEN_OVER_UNMADE
    :: htok != 0 && SLOTS(log[zo[t]]) == ns && htok != WHO(log[zo[t]]) ->   /* MUTANT: a holder whose producer is not made proves it */
#else
    :: htok != 0 && hmade && SLOTS(log[zo[t]]) == ns && htok != WHO(log[zo[t]]) ->
#endif
        printf("A%d: t%d was taken over since A%d's claim: not fenced\n", me, t, WHO(log[zo[t]]))
    :: hafter != NONE && hafter > zo[t] ->
        printf("A%d: t%d's holder was initialized after the claim at %d: not fenced\n", me, t, zo[t])
#endif
    :: else ->
        if
        :: atomic { init_id(t); printf("A%d: fenced t%d\n", me, t) }
        :: atomic { locked -> lock[L(ns, t)] = 0; locked = false }; goto failed
        :: atomic { !locked }; goto failed
        fi
    fi;
    atomic {
        if
        :: locked -> lock[L(ns, t)] = 0; locked = false
        :: else -> skip
        fi;
        zo[t] = NONE; htok = 0; hafter = 0; hmade = false
    }
    goto fence_next;
fenced:
    t = 0;
    CRASH_POINT;

    /* produce: the first record opens the transaction */
    if
    :: atomic {
           if
           :: CURRENT(s, my_pe) -> open[s] = true; txn_ver[s] = ver; opener[s] = me;
                printf("A%d: produced its records in a transaction of t%d\n", me, s)
           :: else -> printf("A%d: produce: PRODUCER_FENCED\n", me); goto failed
           fi
       }
    :: goto failed
    fi;
    CRASH_POINT;

    /* read, then decide_progress_commit */
    if
    :: atomic { NO_PENDING -> seen = P; printf("A%d: stable read: P = %d\n", me, seen) }
    :: goto failed
    fi;
    CRASH_POINT;
    if
    :: seen < ver -> seen = 0
    :: seen == ver -> seen = 0; goto skipped
#if defined(VERSIONED)
    :: seen > ver -> seen = 0; printf("A%d: a later version was written: skipped\n", me); goto skipped
#elif defined(MUTANT_NO_STALE_VERSION)
    :: seen > ver -> seen = 0          /* MUTANT: an older batch is written over a later one */
#else
    :: seen > ver -> seen = 0; printf("A%d: a later batch was written: refuses (stale)\n", me); goto failed
#endif
    fi;

    /* send */
    if
    :: atomic {
           if
           :: CURRENT(s, my_pe) -> pending[s] = ver; printf("A%d: sent progress %d to its transaction\n", me, ver)
           :: else -> printf("A%d: send offsets: PRODUCER_FENCED\n", me); goto failed
           fi
       }
    :: goto failed
    fi;
    CRASH_POINT;

    /* commit */
    if
    :: atomic {
           if
           :: CURRENT(s, my_pe) -> printf("A%d: COMMITTED: version %d visible, P = %d\n", me, ver, ver); commit_txn(s)
           :: else -> printf("A%d: commit: PRODUCER_FENCED\n", me); goto failed
           fi
       }
    :: goto failed
    fi;
    if
    :: goto succeeded
    :: printf("A%d: the commit's answer was lost: the task fails\n", me); goto failed
    fi;

skipped:
    atomic {
        if
        :: CURRENT(s, my_pe) && open[s] -> end_txn(s)
        :: else -> skip
        fi;
        printf("A%d: already written: aborts, succeeds without writing\n", me)
    }
succeeded:
    /* None lost: the version this task succeeded for is visible (a batch write: or a later one). */
#ifdef VERSIONED
    assert(visible[ver] == 1 || P > ver);
#else
    assert(visible[ver] == 1);
#endif
    if
    :: ver == 1 -> v1_done = true
    :: else -> skip
    fi;
#ifdef CRASHES
    assert(me != NEWEST || !(open[0] && dead[opener[0]] || open[1] && dead[opener[1]] || open[2] && dead[opener[2]]));
#endif
    goto release;

failed:
    atomic {
        if
        :: CURRENT(s, my_pe) && open[s] -> end_txn(s); printf("A%d: aborted its transaction\n", me)
        :: else -> printf("A%d: fails\n", me)
        fi
    }
release:
    atomic {
        if
        :: o != NONE -> log[log_end] = ENTRY(RELEASE, me, ns, s); log_end++;
                        printf("A%d: RELEASE at %d\n", me, log_end - 1)
        :: else -> skip
        fi;
        free_locks()
    }
#ifdef CRASHES
    goto done;
crashed:
    printf("A%d: dies (no abort, no release)\n", me);
done:
    skip
#endif
}

/* Another task of the same application holding a slot of its host (EXECUTOR_IDS: slot 0 of run
 * 3's lock files): its init fences whatever the id had open; it records its producer. */
proctype Holder(byte me; byte qrun; byte pl) {
    byte ns = NS(qrun);
    byte s, my_pe, i;
end_unplanned:
    plan_at[pl] != NONE;
    lease();   /* any free slot: a dead attempt's too */
    atomic { init_id(s); my_pe = pe[s]; printf("H: init_transactions on t%d\n", s) }
    atomic { pend[L(ns, s)] = false; after[L(ns, s)] = plan_at[pl]; made[L(ns, s)] = true;
             printf("H: recorded its producer, initialized after plan record %d\n", plan_at[pl]) }
end_holding:
    skip
}

init {
    atomic {
        log[0] = ENTRY(PLAN, 0, 0, 0); plan_at[1] = 0; plan_at[2] = NONE; plan_at[3] = NONE;
#ifdef RETRY
        run Attempt(1, 1, 1, 1, false);
        run Attempt(2, 1, 1, 1, false);
#endif
#ifdef RESTART
        run Attempt(1, 1, 1, 1, false);
        run Attempt(2, 2, 1, 2, true);
#endif
#ifdef RESTART_RETRY
        run Attempt(1, 1, 1, 1, false);
        run Attempt(2, 2, 1, 2, true);
        run Attempt(3, 2, 1, 2, false);
#endif
#ifdef NEXT_VERSION
        run Attempt(1, 1, 1, 1, false);
        run Attempt(2, 1, 1, 1, false);
        run Attempt(3, 1, 2, 2, true);
#endif
#ifdef VERSIONED
        run Attempt(1, 1, 1, 1, false);
        run Attempt(2, 2, 2, 2, true);
        run Attempt(3, 3, 1, 3, true);
#endif
#ifdef OTHER_TASK
        run Holder(HOLDER_ME, 1, 1);   /* another task of run 1, on a slot of the same host */
#endif
#ifdef EXECUTOR_IDS
        /* A run-1 attempt claimed under t0 (its application's executor slot 0) and died. */
        log[1] = ENTRY(CLAIM, 1, 1, 0); log_end = 2; dead[1] = true;
        run Attempt(2, 2, 1, 2, true);
        run Attempt(3, 3, 1, 3, true);
        run Holder(HOLDER_ME, 3, 3);
#endif
    }
}
