"""The servers layer: real Valkey servers and how to reach them: embedded servers, containers and the
compose pair, zygotes, the frozen clock, clients and the wire, binaries and versions, the walker
module; the C sources in c/, the walker crate in walker-crate/.
"""
