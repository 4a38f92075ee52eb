"""The differential fuzzer: seeded random programs run on accel and on its
target and compared (``python -m tools.fuzz``, ``make fuzz``;
docs/testing.md#differential-fuzzing). ``programs`` makes the programs,
``differential`` runs and compares them, shrinks mismatches and writes
reproducers, ``prelude`` holds the helpers every program and reproducer uses."""
