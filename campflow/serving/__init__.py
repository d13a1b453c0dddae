"""Reaching a checkpoint: in-process, a server launched for it, or a running endpoint (``serving`` config)."""

from campflow.serving.servers import CheckpointServers, serve_checkpoint

__all__ = ["CheckpointServers", "serve_checkpoint"]
