"""The one-GPU run (``tools/gpu-check.sh --one-gpu``): what a single GPU can show of
recovery, prepared to run as one command on a machine without network.

Its sections (:mod:`.plan`) are named scenarios whose ranks share the GPU over gloo
with CUDA tensors: a kill under restart, reinit and torchft; the checkpoint designs from
device memory at two state sizes; the fault-free tax with device memory. The run
(:mod:`.drive`) gives each section a slice of an overall deadline, stops a section
that outruns it (finished trials are kept), and writes a summary (:mod:`.summary`)
and the packed run directories into one folder. What the machine lacks travels as
wheels (:mod:`.wheels`, checked against the image's facts in :mod:`.image`). Its
dry run checks all of it on a machine without a GPU.
"""
