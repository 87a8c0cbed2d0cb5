"""Client callbacks named by an option: ``kafka.oauth_cb=module:function``.

Spark's options are strings, and Spark's own connector reaches token-based logins (Amazon MSK IAM,
OIDC) through a JVM class name. Here the option names a Python callable instead, imported in each
process that builds a Kafka client (the driver and every executor's Python workers), so that the
module must be installed, or shipped with ``--py-files``, everywhere the job runs.

For ``oauth_cb``, confluent-kafka calls ``function(sasl.oauthbearer.config)`` when a client
needs a token; it returns ``(token, expiry in seconds since the epoch)`` or ``(token, expiry,
principal, extensions)``.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigurationError

CALLBACK_SETTINGS = ("oauth_cb",)


@dataclass(frozen=True)
class ImportedCallable:
    """The callable ``path`` names, imported on its first call in each process: the value pickles
    (to the executors) and compares (for the caches of settings) by its path."""

    option: str
    path: str

    def __call__(self, *args):
        return resolve(self.option, self.path)(*args)

    def __str__(self) -> str:
        return self.path


def with_callbacks(params: dict) -> dict:
    """``params`` with each callback setting's ``module:function`` checked and made callable."""
    for name in CALLBACK_SETTINGS:
        if isinstance(params.get(name), str):
            callback = ImportedCallable(f"kafka.{name}", params[name].strip())
            resolve(callback.option, callback.path)  # fails here, on the driver, naming the option
            params[name] = callback
    return params


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
