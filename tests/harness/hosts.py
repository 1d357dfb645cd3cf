"""A host as backend=auto and the JAX platform choice see it: device files and PCI vendors under a fake root."""

import os


def fake_host(root, *paths, vendor=None):
    root = str(root)
    for p in paths:
        os.makedirs(os.path.dirname(root + p), exist_ok=True)
        open(root + p, "w").close()
    if vendor:
        os.makedirs(root + "/sys/bus/pci/devices/0000:00:04.0", exist_ok=True)
        with open(root + "/sys/bus/pci/devices/0000:00:04.0/vendor", "w") as f:
            f.write(vendor + "\n")
    return str(root)
