"""The history layer: a history as data (the JSON Lines format), its resolution into the calls each
executor receives, scenarios, and shrinking.
"""
