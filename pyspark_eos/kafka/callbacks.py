"""Client callbacks named by an option: ``kafka.oauth_cb=module:function``.

Spark's options are strings, and Spark's own connector reaches token-based logins (Amazon MSK IAM,
OIDC) through a JVM class name. Here the option names a Python callable instead, imported in each
process that builds a Kafka client (the driver and every executor's Python workers), so that the
module must be installed, or shipped with ``--py-files``, everywhere the job runs.

For ``oauth_cb``, confluent-kafka calls ``function(sasl.oauthbearer.config)`` when a client
needs a token; it returns ``(token, expiry in seconds since the epoch)`` or ``(token, expiry,
principal, extensions)``. confluent-kafka 2.13 and newer call it from librdkafka's background
thread; older releases only inside ``poll()``, which the package's admin clients and producers
are not, so they would never get a token.
"""
from __future__ import annotations

import functools
import importlib
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigurationError, MissingDependencyError

CALLBACK_SETTINGS = ("oauth_cb",)
# The first confluent-kafka release that serves oauth_cb from librdkafka's background thread.
OAUTH_CB_SINCE = "2.13"


@dataclass(frozen=True)
class ImportedCallable:
    """The callable ``path`` names, imported on its first call in each process: the value pickles
    (to the executors) and compares (for the caches of settings) by its path."""

    option: str
    path: str

    def __call__(self, *args):
        result = resolve(self.option, self.path)(*args)
        return refresh_early(result) if self.option == "kafka.oauth_cb" else result

    def __str__(self) -> str:
        return self.path


def refresh_early(token: tuple) -> tuple:
    """The token with half its remaining life reported to librdkafka, which fetches the next one at
    80% of what it is told (checked once a second). The broker asks a client to re-authenticate at
    90% of a session it ends with the token (KIP-368): for a token of a few seconds the
    re-authentication comes first, with the old token, and Kafka refuses a second one within a
    second ("Request not valid in current SASL state"), dropping the connection. The token itself
    stays valid until its own expiry."""
    value, expiry, *rest = token
    now = time.time()
    return (value, now + max(0.0, expiry - now) / 2, *rest)


def with_callbacks(params: dict) -> dict:
    """``params`` with each callback setting's ``module:function`` checked and made callable."""
    if isinstance(params.get("oauth_cb"), str):
        _require_background_tokens()
    for name in CALLBACK_SETTINGS:
        if isinstance(params.get(name), str):
            callback = ImportedCallable(f"kafka.{name}", params[name].strip())
            resolve(callback.option, callback.path)  # fails here, on the driver, naming the option
            params[name] = callback
    return params


def _require_background_tokens() -> None:
    import confluent_kafka

    from .dependencies import release, version_of

    found = version_of(confluent_kafka)
    if release(found) < release(OAUTH_CB_SINCE):
        raise MissingDependencyError(
            f"option kafka.oauth_cb needs confluent-kafka {OAUTH_CB_SINCE} or newer here, found {found}: older "
            "releases ask for a token only inside poll(), which eos-kafka's admin clients and producers never call; "
            f"upgrade it (pip install 'confluent-kafka>={OAUTH_CB_SINCE}')")


@functools.lru_cache(maxsize=None)
def resolve(option: str, path: str) -> Callable:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"option {option}={path!r} must name a Python callable as module:function "
                                 "(e.g. my_tokens:msk_iam_token)")
    try:
        target = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(f"option {option}={path!r}: module {module_name!r} cannot be imported here "
                                 f"({error}); install it on the driver and every executor, or ship it with "
                                 "--py-files") from None
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ConfigurationError(f"option {option}={path!r}: module {module_name!r} has no callable {attribute!r}")
    return target
