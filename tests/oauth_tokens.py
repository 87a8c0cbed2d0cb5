"""A token provider for kafka.oauth_cb in the tests: unsecured JWTs (alg "none") that the embedded
broker's OAUTHBEARER listener accepts (secure_listeners). Its configuration string
(kafka.sasl.oauthbearer.config) holds ``sub=<principal> lifetime=<seconds> log=<file>``; each token
issued appends "<pid> <issued at>" to the log file, so a test sees which processes took one."""
from __future__ import annotations

import base64
import json
import os
import time


def unsecured_token(config: str):
    settings = dict(item.split("=", 1) for item in config.split())
    issued = time.time()
    # The expiry the client is told is the token's own (whole seconds, as its exp claim).
    expiry = int(issued + float(settings.get("lifetime", 3600)))
    claims = {"sub": settings.get("sub", "eos"), "iat": int(issued), "exp": expiry}
    token = f"{_part({'alg': 'none'})}.{_part(claims)}."
    if "log" in settings:
        with open(settings["log"], "a") as log:
            log.write(f"{os.getpid()} {issued:.3f}\n")
    return token, expiry


def _part(content: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(content).encode()).decode().rstrip("=")
