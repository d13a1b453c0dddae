"""Bootcamps for other trainers: any bootcamp served as an OpenEnv environment (``campflow env serve``).

OpenEnv (``openenv-core``) is the environment protocol TRL's OpenEnv integration and other trainers
speak: a server holds one environment per client session, a client calls ``reset`` and ``step``.
:mod:`campflow.envserve.environment` is the bootcamp behind that interface (train-split instances
only, every step through the rollout engine's rules); :mod:`campflow.envserve.server` runs OpenEnv's
own server for it. Neither is imported by ``import campflow.envserve``: OpenEnv's server stack takes
seconds to import, and only ``campflow env serve`` needs it. The instances come from
:mod:`campflow.envserve.stream`, which serving over MCP (:mod:`campflow.mcp.serve`) draws from too,
without OpenEnv.
"""
