"""What cannot work is refused on the driver, before the first task: a cluster that cannot run
transactions, and a principal without the ACLs on the sink's transactional ids or claims topic.

One broker serves every case: an authorizer with the PLAINTEXT listener's ANONYMOUS principal as
super user (the tests' administrator), the SASL_SSL user as the pipeline's principal, and a
transaction state topic that needs three replicas on one broker, so no transaction coordinator
ever answers. Kafka checks the transactional id's ACL before it looks for a coordinator, and the
claims topic is checked first, so each case shows its own refusal.
"""
from __future__ import annotations

import re
import time

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from pyspark_eos.errors import EosKafkaError
from pyspark_eos.protocol.claims_layout import PIPELINE_PARTITIONS, pipeline_topic
from pyspark_eos.sink.driver_checks import check_sink_can_commit
from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
from pyspark_eos.testing.secure_listeners import SASL_USERS, client_settings

from .kafka_tools import create_topic, read_committed, unique_name

PIPELINE_USER = next(iter(SASL_USERS))
CONNECT_TIMEOUT_MS = 5000
# The connect timeout bounds the driver's check; Spark plans the write in Python workers it may
# have to start first. One case runs a write through Spark; the others call the driver's check.
CEILING_S = CONNECT_TIMEOUT_MS / 1000 + 20


@pytest.fixture(scope="module")
def guarded(tmp_path_factory) -> EmbeddedKafkaCluster:
    overrides = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:ANONYMOUS",
                 "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2}
    with EmbeddedKafkaCluster(directory=tmp_path_factory.mktemp("guarded"), overrides=overrides, secure=True) as cluster:
        yield cluster


def allow(cluster, operations: list[str], resource: str, name: str, prefixed: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    bindings = [AclBinding(getattr(ResourceType, resource), name,
                           ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL,
                           f"User:{PIPELINE_USER}", "*", getattr(AclOperation, operation), AclPermissionType.ALLOW)
                for operation in operations]
    for future in admin.create_acls(bindings, request_timeout=30).values():
        future.result(30)


class IdempotentWrite:
    """A batch write with txnAppId over SASL_SSL as the pipeline's user: its ids are
    ``<prefix>.app-<txnAppId>.*`` and its tasks read and append claims, in the claims topic and in
    its pipeline's own (created here, as an administrator would, so that its ACLs can be checked)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.output = create_topic(cluster.bootstrap_servers, unique_name("out"))
        self.claims = create_topic(cluster.bootstrap_servers, unique_name("claims"))
        self.prefix, self.app = unique_name("refused"), unique_name("app")
        self.pipeline_claims = create_topic(cluster.bootstrap_servers,
                                            pipeline_topic(self.claims, SinkOptions.parse(self.options()).pipeline),
                                            PIPELINE_PARTITIONS)
        allow(cluster, ["WRITE"], "TOPIC", self.output)
        allow(cluster, ["READ"], "GROUP", f"{self.prefix}.progress.", prefixed=True)

    def allow_claims(self, operations: list[str]) -> None:
        """``operations`` on the claims topics: ``claimsTopic`` and the ones it prefixes."""
        allow(self.cluster, operations, "TOPIC", self.claims, prefixed=True)

    @property
    def id_prefix(self) -> str:
        return f"{self.prefix}.app-{self.app}."

    def options(self) -> dict[str, str]:
        settings = client_settings(self.cluster.tls, "SASL_SSL")
        return {"kafka.bootstrap.servers": self.cluster.listener("SASL_SSL"), "topic": self.output,
                "transactionalIdPrefix": self.prefix, "claimsTopic": self.claims, "txnAppId": self.app,
                "txnVersion": "1", "connectTimeoutMs": str(CONNECT_TIMEOUT_MS),
                **{f"kafka.{key}": value for key, value in settings.items()}}

    def refused(self, spark, message: str) -> None:
        """The write fails on the driver (where Spark builds its writer) with ``message``, and none
        of its tasks ran."""
        started = time.monotonic()
        with pytest.raises(Exception, match=message) as failure:
            spark.createDataFrame([("k", "v")], "key string, value string").write.format("eos-kafka") \
                .mode("append").options(**self.options()).save()
        assert time.monotonic() - started < CEILING_S
        assert "Failed to initialize Python data source writer" in str(failure.value)
        assert read_committed(self.cluster.bootstrap_servers, self.output) == []

    def checked(self, message: str) -> None:
        """The same check, called as the driver calls it."""
        with pytest.raises(EosKafkaError, match=message):
            check_sink_can_commit(SinkOptions.parse(self.options()), False, CONNECT_TIMEOUT_MS / 1000)


def test_a_principal_without_the_acl_on_the_transactional_ids_is_refused_naming_it(spark, guarded):
    write = IdempotentWrite(guarded)
    write.allow_claims(["READ", "WRITE"])
    write.refused(spark, re.escape(f"the principal may not use the sink's transactional ids {write.id_prefix}* at "
                                   f"{guarded.listener('SASL_SSL')} (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): grant "
                                   f"WRITE on them, e.g. kafka-acls.sh"))


@pytest.mark.parametrize("granted, missing", [([], "READ and WRITE"), (["WRITE"], "READ")])
def test_a_principal_without_the_acls_on_the_claims_topic_is_refused_naming_them(guarded, granted, missing):
    write = IdempotentWrite(guarded)
    allow(guarded, ["WRITE"], "TRANSACTIONAL_ID", write.id_prefix, prefixed=True)
    if granted:
        write.allow_claims(granted)
    write.checked(re.escape(f"the principal may not {missing} the claims topic {write.pipeline_claims!r} at "
                            f"{guarded.listener('SASL_SSL')}: grant it"))


def test_a_cluster_whose_transaction_coordinator_never_answers_is_refused_saying_why(guarded):
    write = IdempotentWrite(guarded)
    allow(guarded, ["WRITE"], "TRANSACTIONAL_ID", write.id_prefix, prefixed=True)
    write.allow_claims(["READ", "WRITE"])
    write.checked(re.escape(f"no transaction coordinator answered at {guarded.listener('SASL_SSL')} within "
                                   f"{CONNECT_TIMEOUT_MS // 1000} s"))
