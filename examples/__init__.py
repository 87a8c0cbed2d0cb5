"""Pipelines that show eos-kafka at work, run from the checkout (``make demo``); never packaged."""
