"""`difftest fuzz`: the differential tester as a long-running fuzzing service (issue 31).

Worker processes draw histories until stopped, share one record store (a Valkey database, which
also holds Hypothesis's example database), deduplicate findings by their minimal history's
signature, keep a corpus of histories that reached something new, and a dashboard shows it all
live. Layered above the campaign and the reports, below the command line.
"""
