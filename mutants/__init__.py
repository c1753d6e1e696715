"""The mutant catalogue: planted defects in either executor, and the runner that scores them."""
