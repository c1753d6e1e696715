"""The mutant catalogue (planted defects in either executor) and the runner that builds and scores them.

- `catalogue`: the catalogue's metadata and patches (`catalogue/catalogue.toml`, `catalogue/<executor>/<id>.patch`);
- `workspace`: a mutant applied to a cached copy of its executor's source, built when native;
- `score`: one mutant's campaign and its outcome (caught, missed, timeout, unviable);
- `run`: the whole run: null run, canary, then every mutant; outcomes as JSON, exit codes.
"""
