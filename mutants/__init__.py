"""The mutant catalogue (planted defects in either executor) and the runner that builds and scores them.

- `catalogue`: the catalogue's metadata and patches (`catalogue/catalogue.toml`, `catalogue/<executor>/<id>.patch`);
- `workspace`: a mutant applied to a cached copy of its executor's source, built when native;
- `score`: one mutant's campaign and its outcome (caught, missed, timeout, unviable, error);
- `child`: each campaign in its own process, pinned to a core, under a hard time limit, `--jobs` at once;
- `run`: the whole run: null run, canary, then every mutant (or one shard of them); merging shards; exit codes;
- `report`: the report's four forms: outcomes JSON, Stryker mutation-testing JSON, JUnit XML, an HTML page;
- `breakdown`: where each mutant is, the scores per transition, file and class, survivors' diffs and exposure;
- `trend`: the score history across runs (mutants-scores.jsonl) and the change since the last run;
- `incremental`: the digests an outcome depends on, reusing unchanged outcomes, `--in-diff REF`.
"""
