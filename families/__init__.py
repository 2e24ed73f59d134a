"""The built-in env families, one module or folder each, found by name (`contracts.families.ENV_FAMILIES` imports
every module and folder here): nothing else in the package imports them.

Each owns what is particular to it: its vector env and, where its levels are more than a seed, their encoding,
generator, editor, statistics and evaluation level sets (the `maze` folder). `docs/guides/environments.md` ("Adding
an environment family") shows a family written outside the package with all of these.
"""
