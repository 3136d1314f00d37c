"""Plotting shared by the comparison harness and the Ansible benchmark: busbw against bytes per
rank, log-log, one panel per (world size, family). Needs Debian's python3-matplotlib."""


def save_busbw_plot(path, panels, columns=2):
    """panels: list of (title, [(label, xs, ys, emphasis)]); writes a PNG to path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = max(1, (len(panels) + columns - 1) // columns)
    cols = min(columns, max(1, len(panels)))
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.5 * rows), squeeze=False)
    for k, (title, series) in enumerate(panels):
        ax = axes[k // cols][k % cols]
        for label, xs, ys, emphasis in series:
            pts = [(x, y) for x, y in zip(xs, ys) if y]
            if not pts:
                continue
            style = "--" if "memcpy" in label else "-"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3,
                    lw=2.5 if emphasis else 1.2, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for k in range(len(panels), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
