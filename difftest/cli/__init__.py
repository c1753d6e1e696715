"""The command line, the top layer: parses arguments, checks the environment and runs a command of the
layers below.
"""
