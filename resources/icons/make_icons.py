#!/usr/bin/env python3
"""Draws the Octet workbench icon: octet-workbench.svg and the PNG sizes of the
hicolor theme (16..256), with no tool beyond Python (4x4 supersampling).
Run from this folder after changing the design; the outputs are committed."""
import math, struct, zlib

BG, RING, NODE, HUB = (0x1D, 0x35, 0x57), (0x2E, 0xC4, 0xB6), (0xF1, 0xFA, 0xEE), (0xE6, 0x39, 0x46)

def geometry(s):
    """Shapes in a 0..s square: rounded background, 8 nodes on a ring, a hub."""
    c = s / 2
    r_ring = s * 0.32
    nodes = [(c + r_ring * math.cos(math.pi / 8 + k * math.pi / 4),
              c + r_ring * math.sin(math.pi / 8 + k * math.pi / 4)) for k in range(8)]
    return c, r_ring, nodes, s * 0.075, s * 0.11, s * 0.03, s * 0.18

def seg_dist(px, py, ax, ay, bx, by):
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy)))
    return math.hypot(px - ax - t * dx, py - ay - t * dy)

def colour_at(x, y, s):
    c, r_ring, nodes, r_node, r_hub, w_line, corner = geometry(s)
    # rounded square
    qx, qy = max(abs(x - c) - (c - corner), 0), max(abs(y - c) - (c - corner), 0)
    if math.hypot(qx, qy) > corner: return None
    col = BG
    for i in range(8):
        a, b = nodes[i], nodes[(i + 1) % 8]
        if seg_dist(x, y, *a, *b) < w_line: col = RING
        if seg_dist(x, y, c, c, *a) < w_line * 0.6: col = RING
    if math.hypot(x - c, y - c) < r_hub: col = HUB
    for nx, ny in nodes:
        if math.hypot(x - nx, y - ny) < r_node: col = NODE
    return col

def png(size, path):
    ss = 4
    rows = []
    for py in range(size):
        row = bytearray([0])
        for px in range(size):
            acc = [0, 0, 0, 0]
            for sy in range(ss):
                for sx in range(ss):
                    col = colour_at(px + (sx + 0.5) / ss, py + (sy + 0.5) / ss, size)
                    if col:
                        acc[0] += col[0]; acc[1] += col[1]; acc[2] += col[2]; acc[3] += 255
            n = ss * ss
            a = acc[3] // n
            if a:
                cov = acc[3] / 255
                row += bytes([round(acc[0] / cov), round(acc[1] / cov), round(acc[2] / cov), a])
            else:
                row += bytes(4)
        rows.append(bytes(row))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(b"".join(rows), 9)) + chunk(b"IEND", b"")
    open(path, "wb").write(data)

def svg(path):
    s = 256
    c, r_ring, nodes, r_node, r_hub, w_line, corner = geometry(s)
    hexc = lambda t: "#%02x%02x%02x" % t
    pts = " ".join("%.2f,%.2f" % p for p in nodes)
    spokes = "".join('<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f"/>' % (c, c, x, y) for x, y in nodes)
    dots = "".join('<circle cx="%.2f" cy="%.2f" r="%.2f"/>' % (x, y, r_node) for x, y in nodes)
    open(path, "w").write(
        '<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256" viewBox="0 0 256 256">\n'
        '<title>Octet workbench</title>\n'
        '<rect width="256" height="256" rx="%.2f" fill="%s"/>\n' % (corner, hexc(BG)) +
        '<g stroke="%s" stroke-width="%.2f" stroke-linecap="round">%s</g>\n' % (hexc(RING), w_line * 1.2, spokes) +
        '<polygon points="%s" fill="none" stroke="%s" stroke-width="%.2f" stroke-linejoin="round"/>\n' % (pts, hexc(RING), w_line * 2) +
        '<circle cx="%.2f" cy="%.2f" r="%.2f" fill="%s"/>\n' % (c, c, r_hub, hexc(HUB)) +
        '<g fill="%s">%s</g>\n</svg>\n' % (hexc(NODE), dots))

if __name__ == "__main__":
    svg("octet-workbench.svg")
    for n in (16, 24, 32, 48, 64, 128, 256):
        png(n, "octet-workbench-%d.png" % n)
