"""Contracts shared by actors, learner and services: the run config, the trajectory format and
the on-disk snapshot format. Nothing here imports Ray."""
