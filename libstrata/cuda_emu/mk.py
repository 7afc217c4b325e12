"""mk.py SRC OUT — host-compilable copies of the CUDA sources for emu.h.

Drops the CUDA includes, the host error helpers of cuda_common.cuh and the
launchers (everything after each file's first anonymous namespace, which is
renamed T_<file> so the files can share one test binary). cuda_async.cuh is
not copied: the emulator's own version (cuda_emu/cuda_async.cuh) replaces it.
"""
import os
import sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for f in os.listdir(src):
    if not (f.startswith('cuda_') and (f.endswith('.cu') or f.endswith('.cuh'))): continue
    if f == 'cuda_async.cuh': continue  # cuda_emu/cuda_async.cuh stands in for it
    s = open(os.path.join(src, f)).read()
    s = s.replace('#include <cuda_fp16.h>\n', '').replace('#include <cuda_runtime.h>\n', '')
    if f == 'cuda_common.cuh':
        a = s.index('// ------------------------------------------------------------------ host')
        b = s.index('// ------------------------------------------------------------------ device')
        s = s[:a] + s[b:]
    if f.endswith('.cu') and f != 'cuda_backend.cu':
        # drop the launchers: from the end of the anonymous namespace to the end of namespace cuda
        a = s.index('\n}  // namespace\n')
        b = s.index('}  // namespace cuda')
        s = s[:a] + '\n}  // namespace\n\n' + s[b:]
        s = s.replace('namespace {', 'namespace T_' + f.split('.')[0] + ' {', 1)
    if f == 'cuda_matmul.cu':
        a = s.index('template <int kDtype>\nvoid launch(')
        b = s.index('int64_t units_per_row')
        s = s[:a] + s[b:]
    open(os.path.join(out, f), 'w').write(s)
