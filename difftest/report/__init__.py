"""The report layer: what a finished run writes and shows: summary and text reports, the HTML page,
shards merged, the nightly's history.
"""
