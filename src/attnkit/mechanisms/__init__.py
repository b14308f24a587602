"""Taxonomy mechanisms built from the core (survey §3.1 and §3.3): one concept per module."""
