/* SPDX-License-Identifier: MIT */
/* Axis ticks at "nice" round values, and their labels. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "qkv.h"

/* Ticks k*step for the integers k with lo <= k*step <= hi (a hair of slack for rounding). */
static int ticks_for_step(double lo, double hi, double step, double *ticks, int cap)
{
    double eps = 1e-9 * step;
    double k0 = ceil((lo - eps) / step), k1 = floor((hi + eps) / step);
    /* Beyond 2^52 consecutive multiples are no longer distinct doubles: no usable ticks. */
    if (!(fabs(k0) < 4e15 && fabs(k1) < 4e15) || k1 - k0 > 1e6)
        return 0;
    int count = (int)(k1 - k0) + 1;
    for (int i = 0; ticks && i < count && i < cap; i++) {
        double v = (k0 + i) * step;
        ticks[i] = fabs(v) < eps ? 0.0 : v;
    }
    return count < 0 ? 0 : count;
}

int qkv_nice_ticks(double *ticks, int cap, double *step, double lo, double hi, int target)
{
    if (!(lo < hi) || !isfinite(lo) || !isfinite(hi) || !isfinite(hi - lo) || target < 2 ||
        cap < 1)
        return 0;
    /* Try each round step near range/target and keep the one whose count is nearest to the
     * target; on a tie the larger step, fewer labels, wins. */
    static const double mant[5] = {1.0, 2.0, 2.5, 5.0, 10.0};
    double raw = (hi - lo) / target;
    double mag = pow(10.0, floor(log10(raw)));
    double best = 0.0;
    int best_err = 1 << 30;
    for (int e = -1; e <= 1; e++)
        for (int i = 0; i < 5; i++) {
            double s = mant[i] * mag * pow(10.0, e);
            int n = ticks_for_step(lo, hi, s, NULL, 0);
            int d = n >= target ? n - target : target - n;
            if (n >= 2 && (d < best_err || (d == best_err && s > best))) {
                best_err = d;
                best = s;
            }
        }
    if (best == 0.0) /* even the finest candidate gives fewer than two: use the ends */
        best = hi - lo;
    if (step)
        *step = best;
    int n = ticks_for_step(lo, hi, best, ticks, cap);
    return n < cap ? n : cap;
}

void qkv_tick_label(char *out, size_t cap, double v, double step)
{
    if (!(step > 0.0) || !isfinite(step))
        step = fabs(v) > 0.0 ? fabs(v) : 1.0;
    if (fabs(v) < 1e-9 * step)
        v = 0.0; /* no "-0" */
    double a = fabs(v);
    if (a >= 1e6 || (step < 1e-4 && a > 0.0)) {
        /* Exponent form with enough significant digits to tell neighbouring ticks apart. */
        int sig = (int)floor(log10(a)) - (int)floor(log10(step)) + 2;
        sig = sig < 1 ? 1 : sig > 10 ? 10 : sig;
        snprintf(out, cap, "%.*g", sig, v);
        return;
    }
    int dec = 0; /* the fewest decimals that write the step exactly (0.25 -> 2) */
    while (dec < 9) {
        double s = step * pow(10.0, dec);
        if (fabs(s - round(s)) < 1e-6 * s)
            break;
        dec++;
    }
    snprintf(out, cap, "%.*f", dec, v);
}
