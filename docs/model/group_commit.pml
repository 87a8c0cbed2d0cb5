/*
 * group_commit.pml: the source's group commit (pyspark_eos/source/group_commits.py), in Promela.
 *
 * A streaming query reads one Kafka partition with a consumer group. The driver's member of the
 * group (a static member: group.instance.id) commits, after the fact, the end of every batch Spark
 * has completed: Spark writes batch b to its commit log once all of b's tasks succeeded (so b's
 * output is visible), then calls latestOffset(start = end of b) (and commit(end of b)); the
 * source reads the group's committed offset, first without waiting for open transactions and,
 * if that is behind the end, again stably (waiting while a transaction holds a pending offset, or
 * giving up and committing nothing); it commits the end if the committed offset is behind it
 * (never backward), with a plain OffsetCommit under its member id and generation, and only then
 * returns the next batch's end. Two pipeline shapes:
 *
 *   SHUFFLE  the write tasks commit no input offsets (their output is committed with progress
 *            records elsewhere): a batch's output becoming visible is one step per batch attempt.
 *   NARROW   each write task commits the batch's end in the same Kafka transaction as its output
 *            (TxnOffsetCommit, then EndTxn), after a stable read of the group's offset and the
 *            replay check (commit_decision.decide_input_commit): SKIP when C == its end, COMMIT
 *            when C == its start, any other C refused (OffsetMismatchError: the query fails).
 *
 * Checked, asserted in the step that changes the state: the group's committed offset is never
 * ahead of the output that is visible (every batch up to C has its output visible), it never
 * moves back, and (NARROW) each batch's output becomes visible at most once.
 *
 * Configuration (spin -a -DNAME[=VALUE] group_commit.pml; one of SHUFFLE and NARROW):
 *   SHUFFLE / NARROW   the pipeline's shape (above)
 *   BATCHES=n          batches of the query (2 or 3)
 *   RESTART            run 1's driver may die at any step (its requests already sent stay in
 *                      flight, its open transaction stays open until the broker's timeout); run 2
 *                      then reads the checkpoint (a batch in the offset log but not in the commit
 *                      log is replayed with the same range), joins with the same instance id
 *                      (run 1's member id is fenced) and goes on to the last batch
 *   SECOND_INSTANCE    a second instance of the pipeline starts at any moment, with a copy of the
 *                      checkpoint as it is then (so possibly behind what the first goes on to
 *                      commit), joins with the same instance id while the first keeps running
 *   COMMIT_IN_FLIGHT   group_membership.commit gives up waiting (COMMIT_WAIT_S): a request not
 *                      sent yet is dropped; one already sent is waited for once more, then the
 *                      driver goes on while it is still in flight, and it lands later
 *   ANSWERED_IN_FLIGHT the membership thread's commit call may return (the client's request
 *                      timeout) while the OffsetCommit is still on its way to the coordinator,
 *                      which appends it later
 *   FIX_REJOIN         a proposal, not the code: after a commit whose outcome is unknown (sent
 *                      and unanswered, or answered REQUEST_TIMED_OUT) the membership rejoins under a
 *                      new member id (a new consumer, same instance id), which fences its own late
 *                      commit: what closes ANSWERED_IN_FLIGHT for SHUFFLE (see docs/model/README.md)
 *   SPARK_41           PySpark 4.0/4.1's order: latestOffset() has no start; Spark calls commit(end of
 *                      b) after batch b + 1 is in its offset log, before running it
 *   ASSERT_OUTPUT_ONLY assert only that each batch's output is visible at most once: where a C
 *                      that moved back leads
 *   MUTANT_*           the protocol with one mistake (see each #ifdef): the checker must find it
 *
 * Granularity: each atomic block below is ONE Kafka request (with the local decision taken on
 * its answer, or the coordinator's handling of it), or one step of Spark's scheduler. Nothing
 * larger is atomic, so every interleaving of the drivers, their membership threads, the tasks and
 * the brokers is explored. Within one run Spark runs batches one after the other and a batch's
 * task after the driver planned it, so each run's driver and its tasks are one process; the
 * membership thread (which sends the driver's commits) and the brokers (transaction markers,
 * requests in flight, transaction timeouts) are processes of their own.
 *
 * Kafka's group coordinator (the new one, KIP-848's OffsetMetadataManager): a plain OffsetCommit
 * sets the committed offset when its record is appended to __consumer_offsets. A TxnOffsetCommit
 * appends a pending record; the transaction's commit marker materializes that offset only if no
 * plain commit of the partition was appended after the pending record ("we always keep the most
 * recent committed offset when we have a mix of transactional and regular offset commits",
 * replayEndTransactionMarker, comparing the records' offsets). EndTxn is answered once the commit
 * is decided; the markers are written afterwards: a stable read (require_stable) waits for the
 * marker, a plain read can still see the older offset.
 *
 * Faults are interleavings and choices: a driver dying (RESTART: at any step of run 1; its task's
 * open transaction is then committed by the executor that outlived it, or times out), a request
 * in flight (it lands at any later step of the Kafka process), a task's EndTxn answer lost or its
 * transaction timed out (Spark retries the task), a marker written late.
 *
 * Offsets are small integers: batch b reads [b - 1, b). Record offsets in __consumer_offsets are
 * numbered from 1 again whenever no transaction holds a pending offset (only their order matters).
 */

#ifndef BATCHES
#define BATCHES 2
#endif
#define NB BATCHES
#if NB < 1 || NB > 3
#error "BATCHES is 1, 2 or 3"
#endif

#if defined(NARROW) && defined(SHUFFLE)
#error "NARROW and SHUFFLE are two shapes of pipeline: define one"
#endif
#if !defined(NARROW) && !defined(SHUFFLE)
#error "define SHUFFLE or NARROW"
#endif
#if defined(RESTART) && defined(SECOND_INSTANCE)
#error "RESTART and SECOND_INSTANCE are separate configurations"
#endif
#if defined(RESTART) || defined(SECOND_INSTANCE)
#define RUNS 2
#else
#define RUNS 1
#endif

/* Transactions: one slot per (run, batch); a retried task reuses its batch's slot once the
 * earlier attempt's transaction has ended (its stable read waited for that). */
#define NT (RUNS * NB)
#define TX(r, b) (((r) - 1) * NB + (b))
#define TX_RUN(t) (((t) - 1) / NB + 1)
#define TX_BATCH(t) (((t) - 1) % NB + 1)
#define NONE 0
#define PENDING 1     /* open, with its TxnOffsetCommit's pending record appended */
#define PREPARED 2    /* EndTxn(commit) answered: committed, output visible; its marker on
                       * __consumer_offsets not written yet */

/* ------------------------------------------------------------------ Kafka's state */

/* The group coordinator: the committed offset of the input partition, and the offset in
 * __consumer_offsets of the record it came from (0: never committed); the next record's offset;
 * the member id the static member (group.instance.id) has now: a JoinGroup with the same instance
 * id and no member id (a new run's consumer, or FIX_REJOIN's new consumer) gets a new member id
 * and fences the older one, whose OffsetCommit and TxnOffsetCommit are refused from then on
 * (FENCED_INSTANCE_ID / ILLEGAL_GENERATION). member_of[r]: the member id of run r's consumer. */
byte C = 0;
byte C_rec = 0;
byte orec = 1;
byte member = 1;
byte next_member = 2;
byte member_of[RUNS + 1];

/* Per (run, batch) transaction of a NARROW write task: its state and its pending record's offset. */
byte tx[NT + 1];
byte tx_rec[NT + 1];

/* A stable OffsetFetch is answered UNSTABLE_OFFSET_COMMIT while a transaction holds a pending
 * offset for the partition (open, or committed with its marker not yet written). */
#if NT == 1
#define NO_PENDING (tx[1] == NONE)
#elif NT == 2
#define NO_PENDING (tx[1] == NONE && tx[2] == NONE)
#elif NT == 3
#define NO_PENDING (tx[1] == NONE && tx[2] == NONE && tx[3] == NONE)
#elif NT == 4
#define NO_PENDING (tx[1] == NONE && tx[2] == NONE && tx[3] == NONE && tx[4] == NONE)
#else
#define NO_PENDING (tx[1] == NONE && tx[2] == NONE && tx[3] == NONE && tx[4] == NONE && tx[5] == NONE && tx[6] == NONE)
#endif

/* Per run: the commit the driver handed to its membership thread and the thread has not sent
 * yet (group_membership._commit_request; 0: none), and the OffsetCommit the thread sent and
 * is waiting for (0: none; the thread serves one at a time). ANSWERED_IN_FLIGHT: an OffsetCommit
 * whose call returned (timed out) while the request is still on its way. */
byte req[RUNS + 1];
byte fly[RUNS + 1];
byte fly_id[RUNS + 1];          /* the member id it carries */
#ifdef ANSWERED_IN_FLIGHT
byte late[RUNS + 1];
byte late_id[RUNS + 1];
bool timed_out[RUNS + 1];       /* the thread's last commit call returned REQUEST_TIMED_OUT */
#endif

/* Spark: which runs' drivers are alive; the checkpoint's offset log and commit log (the last batch
 * in each). With SECOND_INSTANCE only run 1 writes these: run 2 has a copy of its own. */
bool alive[RUNS + 1];
byte ck_plan = 0;
byte ck_done = 0;

/* What readers of the output see: how many times batch b's output became visible (index 1..NB). */
byte visible[NB + 1];

/* C before the change being checked; only the assertions read it, so it stays out of the state. */
hidden byte prevC;

/* Every batch up to offset c has its output visible. */
#if NB == 1
#define VISIBLE_THROUGH(c) ((c) < 1 || visible[1] > 0)
#elif NB == 2
#define VISIBLE_THROUGH(c) (((c) < 1 || visible[1] > 0) && ((c) < 2 || visible[2] > 0))
#else
#define VISIBLE_THROUGH(c) (((c) < 1 || visible[1] > 0) && ((c) < 2 || visible[2] > 0) && ((c) < 3 || visible[3] > 0))
#endif

/* The invariants on C, asserted in the very steps that change it (a plain commit appended, a
 * commit marker materializing a pending offset). Output only ever becomes visible, so C is the
 * only thing that can break VISIBLE_THROUGH. */
#ifndef ASSERT_OUTPUT_ONLY
inline check_C() {
    assert(C >= prevC);            /* the committed offset never moves back */
    assert(VISIBLE_THROUGH(C))     /* never ahead of the visible output */
}
#else
inline check_C() {
    skip                           /* ASSERT_OUTPUT_ONLY: see where a bad C leads */
}
#endif

/* ------------------------------------------------------------------ the brokers */

/* Only the order of the records matters, and only while a pending record can be compared with
 * a later one: once no transaction holds a pending offset, every later record is later than the
 * committed one, so the record offsets start again (this keeps the state space finite). */
inline renumber() {
    if
    :: NO_PENDING -> C_rec = 0; orec = 1
    :: else -> skip
    fi
}

/* The group coordinator appends run r0's OffsetCommit(off) sent under member id `id`: accepted
 * from the current member id only (MUTANT_NO_GENERATION: from any). */
inline land(r0, off, id) {
    if
#ifdef MUTANT_NO_GENERATION
    :: true ->        /* MUTANT: the coordinator takes a fenced member's commit */
#else
    :: member == id ->
#endif
        prevC = C; C = off; C_rec = orec; orec++;
        printf("broker: OffsetCommit(%d) of run %d (member id %d) appended at record %d: C = %d\n", off, r0, id, C_rec, C);
        check_C();
        renumber()
    :: else -> printf("broker: OffsetCommit(%d) of run %d (member id %d) refused: FENCED_INSTANCE_ID\n", off, r0, id)
    fi
}

/* The commit marker of transaction t reaches __consumer_offsets: the pending offset is
 * materialized unless a plain commit was appended after its record. */
inline write_marker(t) {
    if
    :: tx_rec[t] > C_rec ->
        prevC = C; C = TX_BATCH(t); C_rec = tx_rec[t];
        printf("broker: commit marker of txn(run %d, batch %d): pending offset %d (record %d) materialized: C = %d\n",
               TX_RUN(t), TX_BATCH(t), TX_BATCH(t), tx_rec[t], C);
        check_C()
    :: else ->
        printf("broker: commit marker of txn(run %d, batch %d): a plain commit (record %d) came after its record %d: offset %d dropped, C stays %d\n",
               TX_RUN(t), TX_BATCH(t), C_rec, tx_rec[t], TX_BATCH(t), C)
    fi;
    tx[t] = NONE; tx_rec[t] = 0;
    renumber()
}

/* transaction.timeout.ms: the coordinator aborts an open transaction (its task then fails on
 * EndTxn; a dead driver's task's transaction ends no other way). */
inline time_out(t) {
    tx[t] = NONE; tx_rec[t] = 0;
    renumber();
    printf("broker: txn(run %d, batch %d) timed out: aborted, its pending offset dropped\n", TX_RUN(t), TX_BATCH(t))
}

/* A task whose driver has died: its executor outlived the driver and commits the transaction
 * (EndTxn), its answer going nowhere. */
inline orphan_commit(t) {
    tx[t] = PREPARED; visible[TX_BATCH(t)]++;
    printf("task %d (run %d, its driver dead): EndTxn(commit): batch %d's output visible (%d time(s)); marker on its way\n",
           TX_BATCH(t), TX_RUN(t), TX_BATCH(t), visible[TX_BATCH(t)]);
    assert(visible[TX_BATCH(t)] <= 1)
}

#define MARKER(t)  :: atomic { tx[t] == PREPARED -> write_marker(t) }
#define TIMEOUT(t) :: atomic { tx[t] == PENDING -> time_out(t) } \
                   :: atomic { tx[t] == PENDING && !alive[TX_RUN(t)] -> orphan_commit(t) }

/* The brokers: markers written after EndTxn, requests in flight landing, transaction timeouts. */
active proctype Kafka() {
end:
    do
    :: atomic { fly[1] != 0 -> land(1, fly[1], fly_id[1]); fly[1] = 0; fly_id[1] = 0 }
#if RUNS == 2
    :: atomic { fly[2] != 0 -> land(2, fly[2], fly_id[2]); fly[2] = 0; fly_id[2] = 0 }
#endif
#ifdef ANSWERED_IN_FLIGHT
    /* The thread's commit call returns REQUEST_TIMED_OUT while the request is still on its way. */
    :: atomic { fly[1] != 0 && late[1] == 0 -> late[1] = fly[1]; late_id[1] = fly_id[1]; fly[1] = 0; fly_id[1] = 0;
                timed_out[1] = true;
                printf("membership thread 1: commit(%d) returns REQUEST_TIMED_OUT; the request is still on its way\n", late[1]) }
    :: atomic { late[1] != 0 -> land(1, late[1], late_id[1]); late[1] = 0; late_id[1] = 0 }
#if RUNS == 2
    :: atomic { fly[2] != 0 && late[2] == 0 -> late[2] = fly[2]; late_id[2] = fly_id[2]; fly[2] = 0; fly_id[2] = 0;
                timed_out[2] = true;
                printf("membership thread 2: commit(%d) returns REQUEST_TIMED_OUT; the request is still on its way\n", late[2]) }
    :: atomic { late[2] != 0 -> land(2, late[2], late_id[2]); late[2] = 0; late_id[2] = 0 }
#endif
#endif
#ifdef NARROW
    MARKER(1)
    TIMEOUT(1)
#if NT >= 2
    MARKER(2)
    TIMEOUT(2)
#endif
#if NT >= 3
    MARKER(3)
    TIMEOUT(3)
#endif
#if NT >= 4
    MARKER(4)
    TIMEOUT(4)
#endif
#if NT >= 5
    MARKER(5)
    TIMEOUT(5)
    MARKER(6)
    TIMEOUT(6)
#endif
#endif
    od
}

/* ------------------------------------------------------------------ a run's membership thread */

/* group_membership._serve_commit: the thread takes the driver's request (started = True) when it
 * is not busy with an earlier one, and sends the OffsetCommit under the run's member id and
 * generation. It dies with its driver. */
proctype MembershipThread(byte r) {
end:
    do
    :: atomic { alive[r] && req[r] != 0 && fly[r] == 0 ->
                fly[r] = req[r]; fly_id[r] = member_of[r]; req[r] = 0;
                printf("membership thread %d: _serve_commit: OffsetCommit(%d) sent (member id %d)\n", r, fly[r], fly_id[r]) }
    od
}

/* ------------------------------------------------------------------ a run's driver and tasks */

#ifdef RESTART
#define CAN_CRASH(r) ((r) == 1)
#define CRASH_POINT if :: CAN_CRASH(r) -> goto crashed :: true -> skip fi
#else
#define CRASH_POINT skip
#endif

/* Under RESTART both runs write the one checkpoint; under SECOND_INSTANCE run 2 has a copy. */
#ifdef RESTART
#define WRITES_CHECKPOINT(r) true
#else
#define WRITES_CHECKPOINT(r) ((r) == 1)
#endif

/* A JoinGroup with the pipeline's group.instance.id and no member id: a new member id, the
 * older one fenced. */
inline new_member_id() {
    member = next_member; member_of[r] = next_member; next_member++
}

/* join_group (planner.join_group, group_membership): once per run, before its first group read
 * or plan. Run 1 joined in initialOffset. */
inline join() {
    if
    :: !joined ->
        atomic { joined = true; new_member_id();
                 printf("driver %d: join_group: JoinGroup with the same group.instance.id: member id %d, the older one fenced\n", r, member) }
    :: else -> skip
    fi
}

/* FIX_REJOIN: after a commit whose outcome is unknown (sent and unanswered, or answered
 * REQUEST_TIMED_OUT), the membership replaces its consumer: a JoinGroup with the same instance id
 * and no member id fences its own older member id, so that commit, if it lands later, is refused. */
inline rejoin() {
    atomic { new_member_id();
             printf("driver %d: the commit's outcome is unknown: rejoins as member id %d, fencing its own older one\n", r, member) }
}

proctype Driver(byte r) {
    byte done;       /* the last batch in its commit log */
    byte planned;    /* the last batch in its offset log */
    byte told;       /* micro_batch_stream._completed: the last completed end told to the source */
    byte b;          /* the batch being run */
    byte e;          /* the end commit_completed_batch commits */
    byte seen;       /* an offset read from the group */
    bool joined;

    if
    :: r == 1 -> joined = true
    :: else ->
#ifdef RESTART
        /* The query restarted: its driver reads the checkpoint once run 1's is gone. */
end_restart:
        atomic { !alive[1] -> alive[2] = true; planned = ck_plan; done = ck_done;
                 printf("driver 2 (restarted): checkpoint: offset log to batch %d, commit log to batch %d\n", planned, done) }
#else
        /* A second instance of the pipeline starts, with a copy of the checkpoint. */
        atomic { alive[2] = true; planned = ck_plan; done = ck_done;
                 printf("instance 2 starts (instance 1 alive): checkpoint copy: offset log to batch %d, commit log to batch %d\n", planned, done) }
#endif
        if
        :: planned > done ->
            b = planned;
            printf("driver %d: batch %d is in the offset log, not the commit log: replayed as [%d, %d)\n", r, b, b - 1, b);
            goto plan
        :: else -> skip
        fi
    fi;

latestOffset:
    /* micro_batch_stream.latestOffset(start = end of `done`): joins (once), then tells the source
     * that the batch is completed (_batch_completed, once per end). SPARK_41: latestOffset() has
     * no start, and commit(end) comes after the next batch's offset log entry (below). */
    join();
#ifndef SPARK_41
#ifdef MUTANT_AT_PLAN
    e = (done < NB -> done + 1 : done);  /* MUTANT: commits the end latestOffset is about to return */
#else
    e = done;
#endif
    if
    :: e > 0 && e != told -> told = e; goto commit_completed_batch
    :: else -> skip
    fi;
#endif
next_batch:
    if
    :: done == NB -> goto finished       /* no new data: the query idles */
    :: else -> skip
    fi;
    b = done + 1;
    /* latestOffset returns b's end; Spark writes it to its offset log */
    atomic { planned = b;
             if :: WRITES_CHECKPOINT(r) -> ck_plan = b :: else -> skip fi;
             printf("driver %d: latestOffset returns %d: offset log: batch %d = [%d, %d)\n", r, b, b, b - 1, b) }
    CRASH_POINT;
#ifdef SPARK_41
    /* PySpark 4.0/4.1: Spark calls commit(end) of the previous batch once the next batch is in its
     * offset log, before running it */
    e = done;
    if
    :: e > 0 && e != told -> told = e; goto commit_completed_batch
    :: else -> skip
    fi;
#endif

plan:
    /* partitions() -> planner.plan: holds the membership (a replaying run joins here) */
    join();

task:
#ifdef NARROW
    /* The write task (transactional_writer._WriteTask._commit): its records are in its
     * transaction; a stable read of the group's offset (group_offsets.fetch_stable_commits)
     * waits while a transaction holds a pending offset. */
stable_read:
    atomic { NO_PENDING -> seen = C; printf("task %d (run %d): stable read: C = %d\n", b, r, seen) }
    CRASH_POINT;
    /* commit_decision.decide_input_commit: SKIP at its end, COMMIT at its start, refuse anything else */
decide_input_commit:
    if
    :: seen == b ->
        atomic { seen = 0; printf("task %d (run %d): decide_input_commit: SKIP (already committed): aborts, succeeds\n", b, r) }
        goto complete
    :: seen == b - 1 -> seen = 0
    :: else ->
        printf("task %d (run %d): decide_input_commit: C = %d is neither %d nor %d: OffsetMismatchError, the query fails\n",
               b, r, seen, b - 1, b);
        goto stopped
    fi;
    /* _WriteTask._send: AddOffsetsToTxn + TxnOffsetCommit(b) with the plan's member id and generation */
send_offsets:
    atomic {
        if
        :: member == member_of[r] ->
            tx[TX(r, b)] = PENDING; tx_rec[TX(r, b)] = orec; orec++;
            printf("task %d (run %d): TxnOffsetCommit(%d): pending at record %d\n", b, r, b, tx_rec[TX(r, b)])
        :: else ->
            printf("task %d (run %d): TxnOffsetCommit: FENCED_INSTANCE_ID: the query fails\n", b, r);
            goto stopped
        fi
    }
    CRASH_POINT;
    /* _WriteTask._commit_transaction: EndTxn(commit), answered once the commit is decided; the
     * markers follow (the Kafka process writes the one on __consumer_offsets) */
commit_transaction:
    atomic {
        if
        :: tx[TX(r, b)] == PENDING ->
            tx[TX(r, b)] = PREPARED; visible[b]++;
            printf("task %d (run %d): EndTxn(commit) answered: batch %d's output visible (%d time(s)); marker on its way\n",
                   b, r, b, visible[b]);
            assert(visible[b] <= 1)     /* each batch's output visible at most once */
        :: else ->
            printf("task %d (run %d): EndTxn: PRODUCER_FENCED (timed out): the task fails, Spark retries it\n", b, r);
            goto task
        fi
    }
    if
    :: skip
    :: printf("task %d (run %d): EndTxn's answer lost: the task fails, Spark retries it\n", b, r); goto task
    fi;
#else
    /* The sink commits the batch's output its own way, at most once (another model's subject). */
    atomic { visible[b] = 1; printf("task %d (run %d): batch %d's output visible\n", b, r, b) }
#endif
    CRASH_POINT;

complete:
    /* Spark: all of b's tasks succeeded: the commit log gets batch b */
    atomic { done = b;
             if :: WRITES_CHECKPOINT(r) -> ck_done = b :: else -> skip fi;
             printf("driver %d: commit log: batch %d\n", r, b) }
    CRASH_POINT;
    goto latestOffset;

commit_completed_batch:
    /* planner.commit_completed_batch. read: kafka.committed_answer, an OffsetFetch that does not
     * wait for open transactions; nothing to commit there (offsets_to_commit: C at or past the
     * end) ends it. */
committed_answer:
    atomic { seen = C; printf("driver %d: commit_completed_batch(%d): committed_answer (not stable): C = %d\n", r, e, seen) }
#ifndef MUTANT_BACKWARD
    if
    :: seen >= e -> printf("driver %d: offsets_to_commit: nothing (C = %d, end %d)\n", r, seen, e); seen = 0; goto committed
    :: else -> skip
    fi;
#endif
#ifndef MUTANT_UNSTABLE_COMMIT_READ
    /* kafka.committed_stable_answer, an OffsetFetch with require_stable: it waits while a
     * transaction holds a pending offset (a narrow pipeline's task whose marker is on its way),
     * or gives up (STABLE_COMMIT_READ_S): nothing is committed then. (MUTANT: the code before it,
     * which committed on the read above.) */
committed_stable_answer:
    if
    :: atomic { NO_PENDING -> seen = C; printf("driver %d: commit_completed_batch(%d): stable read: C = %d\n", r, e, seen) }
    :: printf("driver %d: commit_completed_batch(%d): the stable read gives up: nothing committed\n", r, e); seen = 0; goto committed
    fi;
#endif
    CRASH_POINT;
    /* group_commits.offsets_to_commit: the end, if assigned and committed < end: never backward */
offsets_to_commit:
#ifndef MUTANT_BACKWARD
    if
    :: seen < e -> seen = 0
    :: else ->
        printf("driver %d: offsets_to_commit: nothing (C = %d, end %d)\n", r, seen, e);
        seen = 0;
        goto committed
    fi;
#else
    seen = 0;                               /* MUTANT: commits whatever C is */
#endif
    /* group_membership.commit: hands the request to the membership thread and waits up to
     * COMMIT_WAIT_S for its answer; on a timeout it drops a request not started, and waits once
     * more for one that was (COMMIT_IN_FLIGHT: in vain, the driver goes on) */
membership_commit:
    atomic { req[r] = e; printf("driver %d: group_membership.commit(%d)\n", r, e) }
    if
    :: atomic { req[r] == 0 && fly[r] == 0 -> printf("driver %d: commit(%d) answered\n", r, e) }   /* request.done */
#if defined(FIX_REJOIN) && defined(ANSWERED_IN_FLIGHT)
        if
        :: timed_out[r] -> timed_out[r] = false; rejoin()
        :: else -> skip
        fi
#endif
#ifdef COMMIT_IN_FLIGHT
    :: atomic { req[r] != 0 -> req[r] = 0;
                printf("driver %d: commit(%d) not sent within COMMIT_WAIT_S: dropped, goes on\n", r, e) }
    :: atomic { req[r] == 0 && fly[r] != 0 ->
                printf("driver %d: commit(%d) sent, unanswered after 2 x COMMIT_WAIT_S: goes on, it is in flight\n", r, e) }
#ifdef FIX_REJOIN
        rejoin()
#endif
#endif
#ifdef RESTART
    :: CAN_CRASH(r) -> goto crashed
#endif
    fi;
committed:
#ifdef SPARK_41
    goto plan;
#else
    goto next_batch;
#endif

finished:
    atomic { alive[r] = false; printf("driver %d: batch %d is the last: the query stops\n", r, done) }
    goto gone;
stopped:
crashed:
    atomic { alive[r] = false; req[r] = 0;
             printf("driver %d: stops (dies or fails); what it sent stays in flight\n", r) }
gone:
    skip
}

init {
    atomic {
        alive[1] = true; member_of[1] = 1;
        printf("driver 1: initialOffset: joins the group (static member, member id 1); starts at 0\n");
        run Driver(1);
        run MembershipThread(1);
#if RUNS == 2
        run Driver(2);
        run MembershipThread(2);
#endif
    }
}
