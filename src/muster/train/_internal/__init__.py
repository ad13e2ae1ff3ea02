"""Internals of muster.train: not public API."""
