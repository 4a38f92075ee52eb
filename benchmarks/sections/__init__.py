"""The sections of benchmarks/run.py, one module each. A section module has
run(results, quick), which adds its figures to the results under its name,
markdown(results), its heading and table, and, where its figures have goals,
warnings(results). common.py holds what they share."""
