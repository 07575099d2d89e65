#!/usr/bin/env python3
"""Writes the GPU node topologies of tests/topologies/ (see README.md).

Each starts from hwloc's synthetic topology (lstopo-no-graphics --input
SPEC --of xml, hwloc 2.9) and gets the PCI tree of its GPUs added the way
lstopo writes it: host bridge -> (PCIe switch ->) GPU PCIDev -> OS device
"nvml<k>" (and a NIC where the real machine has one next to the GPUs).
Run from the top of the tree: python3 tests/topologies/make_gpu_nodes.py
"""
import subprocess
import xml.etree.ElementTree as ET

NVIDIA_H100 = "0302 [10de:2330] [10de:16c1] a1"
NVIDIA_A100 = "0302 [10de:20b0] [10de:134f] a1"
NVIDIA_GH200 = "0302 [10de:2342] [10de:16eb] a1"
MELLANOX_CX7 = "0207 [15b3:1021] [15b3:0041] 00"

_gp = [100000]


def gp():
    _gp[0] += 1
    return str(_gp[0])


def obj(parent, typ, **attrs):
    e = ET.SubElement(parent, "object", {"type": typ, "gp_index": gp()})
    for k, v in attrs.items():
        e.set(k, v)
    return e


def host_bridge(parent, bus_lo, bus_hi):
    return obj(parent, "Bridge", bridge_type="0-1", depth="0",
               bridge_pci="0000:[%02x-%02x]" % (bus_lo, bus_hi))


def switch(parent, bus, bus_lo, bus_hi):
    return obj(parent, "Bridge", bridge_type="1-1", depth="1",
               pci_busid="0000:%02x:00.0" % bus, pci_type="0604 [1000:c010] [1000:a064] b0",
               bridge_pci="0000:[%02x-%02x]" % (bus_lo, bus_hi))


def gpu(parent, bus, k, name, pci_type):
    d = obj(parent, "PCIDev", name=name, pci_busid="0000:%02x:00.0" % bus, pci_type=pci_type,
            pci_link_speed="31.507692")
    o = obj(d, "OSDev", name="nvml%d" % k, subtype="NVML", osdev_type="1")
    ET.SubElement(o, "info", {"name": "Backend", "value": "NVML"})
    obj(d, "OSDev", name="card%d" % (k + 1), osdev_type="1")
    return d


def nic(parent, bus, k):
    d = obj(parent, "PCIDev", name="Mellanox ConnectX-7", pci_busid="0000:%02x:00.0" % bus,
            pci_type=MELLANOX_CX7, pci_link_speed="31.507692")
    obj(d, "OSDev", name="mlx5_%d" % k, osdev_type="3")
    return d


def synthetic(spec, description):
    xml = subprocess.run(["lstopo-no-graphics", "--input", spec, "--of", "xml", "-"],
                         check=True, capture_output=True, text=True).stdout
    root = ET.fromstring(xml)
    machine = root.find("object")
    for info in machine.findall("info"):
        if info.get("name") == "SyntheticDescription":
            info.set("value", description)
        elif info.get("name") == "ProcessName":
            machine.remove(info)
    return root, machine


def write(root, path):
    ET.indent(root, "  ")
    body = ET.tostring(root, encoding="unicode")
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n' + body + "\n")


def dgx():
    """2 sockets x 2 NUMA domains (one L3 each) x 8 cores x 2 PUs; each
    NUMA domain has one PCIe switch with two GPUs and a NIC (DGX A100: 8
    GPUs, NVLink between them is not in hwloc's PCI tree)."""
    root, m = synthetic("pack:2 l3:2 [numa] core:8 pu:2",
                        "DGX-like: 2 sockets x 2 NUMA x 8 cores x 2 PUs, "
                        "8 A100 behind 4 PCIe switches (2 GPUs + 1 NIC each)")
    buses = [(0x07, 0x0F), (0x47, 0x4E), (0x87, 0x90), (0xB7, 0xBD)]
    l3s = m.findall(".//object[@type='L3Cache']")
    for dom, (l3, (b0, b1)) in enumerate(zip(l3s, buses)):
        hb = host_bridge(l3, b0 - 4, b1 + 4)
        sw = switch(hb, b0 - 3, b0 - 2, b1 + 4)
        gpu(sw, b0, 2 * dom, "NVIDIA A100-SXM4-80GB", NVIDIA_A100)
        gpu(sw, b1, 2 * dom + 1, "NVIDIA A100-SXM4-80GB", NVIDIA_A100)
        nic(sw, b1 + 2, dom)
    write(root, "tests/topologies/dgx-2socket-8gpu.xml")


def one_socket_4gpu():
    """1 socket x 16 cores x 2 PUs, four H100 PCIe cards each behind its own
    host bridge."""
    root, m = synthetic("pack:1 [numa] core:16 pu:2",
                        "1 socket x 16 cores x 2 PUs, 4 H100 PCIe on own host bridges")
    pkg = m.find(".//object[@type='Package']")
    for k, bus in enumerate([0x17, 0x31, 0xB1, 0xCA]):
        gpu(host_bridge(pkg, bus, bus), bus, k, "NVIDIA H100 PCIe", NVIDIA_H100)
    write(root, "tests/topologies/1socket-4gpu.xml")


def gh200():
    """Grace Hopper: 72 Neoverse cores without SMT in one package, the
    Hopper GPU on the package's PCIe (C2C) root, no other GPU."""
    root, m = synthetic("pack:1 [numa] core:72 pu:1",
                        "GH200-like: 72 cores without SMT, 1 H100 GPU on the package")
    pkg = m.find(".//object[@type='Package']")
    gpu(host_bridge(pkg, 0x01, 0x01), 0x01, 0, "NVIDIA GH200 480GB", NVIDIA_GH200)
    write(root, "tests/topologies/gh200.xml")


if __name__ == "__main__":
    dgx()
    one_socket_4gpu()
    gh200()
