"""The GPU machine the one-GPU run is made for, as it was read, and the wheel tags it takes.

One NVIDIA H100 (about 78 GiB), 16 cores, no network: nothing can be installed there
from a registry, so what its image lacks travels with the tree as wheels. The facts
below are the machine's as this project's device notes record them (read on such a
machine on 2026-11-17, its Python and torch on 2026-11-13): Python 3.12.3 at
/opt/torch/.venv/bin/python3, torch 2.11.0+cu130, and the distributions listed in
:data:`PACKAGES`. Python 3.12.3 is Ubuntu 24.04's, whose glibc is 2.39: a wheel built
for manylinux_2_N with N up to 39 runs there.
"""

from __future__ import annotations

from functools import cache

from packaging.markers import default_environment
from packaging.tags import Tag, compatible_tags, cpython_tags

PYTHON = (3, 12)
PYTHON_FULL = "3.12.3"
TORCH = "2.11.0"
GLIBC = (2, 39)
MACHINE = "x86_64"
READ_ON = "2026-11-17"

#: Every distribution the image holds (names as pip lists them), as read on READ_ON;
#: versions are known for torch only (and for what the notes name: numpy 2.5.2,
#: safetensors 0.8.0, triton 3.6.0...), so a requirement met here is met by name.
_NAMES = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings
    cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils
    execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet
    httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax
    jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
    lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib
    mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
    narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
    nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink
    nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
    opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
    pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
    pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
    pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
    scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
    setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
    tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
    torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
    typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
    xxhash yarl zipp
    """
PACKAGES = frozenset(_NAMES.split())


def platforms() -> list[str]:
    """The platform tags of the image, newest first: manylinux_2_N up to its glibc, the
    legacy aliases (manylinux2014 is 2_17, manylinux2010 2_12, manylinux1 2_5), linux."""
    major, minor = GLIBC
    tags = [f"manylinux_{major}_{n}_{MACHINE}" for n in range(minor, 4, -1)]
    return [*tags, f"manylinux2014_{MACHINE}", f"manylinux2010_{MACHINE}", f"manylinux1_{MACHINE}", f"linux_{MACHINE}"]


@cache
def supported() -> frozenset[Tag]:
    """Every wheel tag the image's CPython 3.12 on x86-64 Linux installs."""
    plats = platforms()
    return frozenset([*cpython_tags(python_version=PYTHON, platforms=plats), *compatible_tags(PYTHON, "cp312", plats)])


def marker_environment() -> dict[str, str]:
    """The image's values for requirement markers (``python_version < "3.13"``, ...),
    whatever interpreter checks them."""
    env = {key: str(value) for key, value in default_environment().items()}
    env.update(
        python_version="3.12",
        python_full_version=PYTHON_FULL,
        implementation_name="cpython",
        implementation_version=PYTHON_FULL,
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine=MACHINE,
        os_name="posix",
        extra="",
    )
    return env
