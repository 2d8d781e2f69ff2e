"""Tests of the project's tooling: the benches, the docs, the demo, the scripts and the package."""
