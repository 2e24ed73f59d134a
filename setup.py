"""Build hook for the optional C kernels of the replay sum tree; all metadata lives in pyproject.toml.

``optional=True``: without a working C compiler the install still succeeds and
``replay_service.sumtree`` falls back to its NumPy implementation.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "levelray.replay_service._sumtree_c",
            ["replay_service/_sumtree_c.c"],
            optional=True,
            extra_compile_args=["-O3"],
        )
    ]
)
