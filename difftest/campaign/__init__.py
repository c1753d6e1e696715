"""The campaign layer: many histories from the generator (strategies/), in batches and worker
processes, with the example database and progress.
"""
