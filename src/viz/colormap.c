/* SPDX-License-Identifier: MIT */
/* Colours: the heatmap ramp and the palette of plot series.
 *
 * The ramp is built where perception is roughly uniform, in CIELAB: lightness L* climbs in
 * equal steps from 16 to 92 while the hue angle turns from violet (315 deg) through blue,
 * teal and green to yellow (100 deg), at a chroma each control point's hue can hold inside
 * the sRGB gamut. Lab is interpolated linearly between the five control points and converted
 * to sRGB (D65), so brightness alone already orders the values (the map survives grey-scale
 * printing and most colour-vision deficiencies), and hue helps tell neighbouring values apart. */
#include <math.h>

#include "qkv.h"

/* (L*, chroma, hue in degrees) at t = 0, 1/4, 1/2, 3/4, 1. */
static const double ramp_lch[5][3] = {
    {16.0, 48.0, 315.0}, /* dark violet */
    {35.0, 36.0, 280.0}, /* blue */
    {54.0, 32.0, 195.0}, /* teal */
    {73.0, 60.0, 140.0}, /* green */
    {92.0, 80.0, 100.0}, /* yellow */
};

/* CIELAB (D65) to 8-bit sRGB, clamped. */
static qkv_rgb lab_to_srgb(double L, double a, double b)
{
    double fy = (L + 16.0) / 116.0, fx = fy + a / 500.0, fz = fy - b / 200.0;
    const double e = 6.0 / 29.0;
    double f[3] = {fx, fy, fz}, xyz[3];
    for (int i = 0; i < 3; i++) /* inverse of the Lab companding f(t) */
        xyz[i] = f[i] > e ? f[i] * f[i] * f[i] : 3.0 * e * e * (f[i] - 4.0 / 29.0);
    xyz[0] *= 0.95047, xyz[2] *= 1.08883; /* D65 white */
    double lin[3] = {
        3.2406 * xyz[0] - 1.5372 * xyz[1] - 0.4986 * xyz[2],
        -0.9689 * xyz[0] + 1.8758 * xyz[1] + 0.0415 * xyz[2],
        0.0557 * xyz[0] - 0.2040 * xyz[1] + 1.0570 * xyz[2],
    };
    uint8_t out[3];
    for (int i = 0; i < 3; i++) {
        double c = lin[i] <= 0.0 ? 0.0 : lin[i] >= 1.0 ? 1.0 : lin[i];
        c = c <= 0.0031308 ? 12.92 * c : 1.055 * pow(c, 1.0 / 2.4) - 0.055; /* sRGB gamma */
        out[i] = (uint8_t)lround(c * 255.0);
    }
    qkv_rgb rgb = {out[0], out[1], out[2]};
    return rgb;
}

qkv_rgb qkv_colormap(float t)
{
    if (!(t >= 0.0f)) /* also NaN: the caller decides how to show missing values */
        t = 0.0f;
    if (t > 1.0f)
        t = 1.0f;
    double s = t * 4.0;
    int k = s >= 4.0 ? 3 : (int)s;
    double u = s - k, lab[2][3];
    for (int j = 0; j < 2; j++) {
        const double *p = ramp_lch[k + j];
        double h = p[2] * (3.14159265358979323846 / 180.0);
        lab[j][0] = p[0], lab[j][1] = p[1] * cos(h), lab[j][2] = p[1] * sin(h);
    }
    return lab_to_srgb((1 - u) * lab[0][0] + u * lab[1][0], (1 - u) * lab[0][1] + u * lab[1][1],
                       (1 - u) * lab[0][2] + u * lab[1][2]);
}

qkv_rgb qkv_palette(int i)
{
    /* Okabe & Ito's colour-blind-safe set, without its yellow (too faint on white). */
    static const uint32_t hex[7] = {0x0072B2, 0xD55E00, 0x009E73, 0xCC79A7,
                                    0xE69F00, 0x56B4E9, 0x000000};
    return qkv_rgb_hex(hex[((i % 7) + 7) % 7]);
}
