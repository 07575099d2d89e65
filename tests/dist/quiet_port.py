#!/usr/bin/env python3
# Prints a TCP port for MASTER_PORT that no socket of this host holds,
# above the kernel's ephemeral ports (ip_local_port_range, 32768-60999 by
# default) with room for the 64 where rank 0's store may move. A port asked
# of the kernel (bind to port 0) was one of the ephemeral ports, and
# released until rank 0 bound it seconds later (after Python imported torch,
# for the PyTorch cases): any outgoing connection of the host could take it
# meanwhile, and the Slurm tests beside this one make several a second (up
# to 270 sockets in TIME_WAIT counted): about 1 time in 3000 for a cdl rank
# that binds within 2 s, 1 in 400 for a PyTorch rank that binds after
# importing torch and transformers. The kernel never gives a port above
# that range to a connection; only a process naming it can take it.
# Falls back to a port the kernel gives (bind to port 0) where fewer than
# 1000 ports lie above that range or none of 200 drawn is free. Shared by
# tests/dist/common.sh and tests/slurm/lib.sh (their free_port).
import random, socket
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
top = 65535 - 64
ports = list(range(hi + 1, top + 1)) if top - hi >= 1000 else []   # else as before
random.shuffle(ports)
def free(p):
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(fam)
        except OSError:
            continue   # no IPv6 here
        try:
            s.bind((addr, p))   # bound only, never listening: freed at once
        except OSError:
            return False
        finally:
            s.close()
    return True
for p in ports[:200]:
    if free(p):
        print(p)
        break
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
