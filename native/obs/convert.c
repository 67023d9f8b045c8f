#include "convert.h"

#include <math.h>
#include <obs.h>
#include <string.h>

int fl_obs_frame_layout(int obs_video_format, fl_obs_layout *out) {
  switch (obs_video_format) {
  case VIDEO_FORMAT_RGBA: *out = (fl_obs_layout){0, 1, 2, 3, 4}; return 1;
  case VIDEO_FORMAT_BGRA: *out = (fl_obs_layout){2, 1, 0, 3, 4}; return 1;
  case VIDEO_FORMAT_BGRX: *out = (fl_obs_layout){2, 1, 0, -1, 4}; return 1;
  case VIDEO_FORMAT_BGR3: *out = (fl_obs_layout){2, 1, 0, -1, 3}; return 1;
  default: return 0;
  }
}

fl_obs_layout fl_obs_model_layout(int bgr, int channels) {
  fl_obs_layout l = bgr ? (fl_obs_layout){2, 1, 0, 3, 4} : (fl_obs_layout){0, 1, 2, 3, 4};
  if (channels == 3) {
    l.a = -1;
    l.bytes = 3;
  }
  return l;
}

static int same(fl_obs_layout x, fl_obs_layout y) {
  /* Padding (BGRX) against alpha: the model sees the padding byte as alpha and whatever it
   * writes there is padding again, so a BGRX frame travels to a BGRA model unchanged. */
  int xa = x.a < 0 && x.bytes == 4 ? 3 : x.a;
  int ya = y.a < 0 && y.bytes == 4 ? 3 : y.a;
  return x.r == y.r && x.g == y.g && x.b == y.b && x.bytes == y.bytes && xa == ya;
}

void fl_obs_convert(const uint8_t *src, size_t src_stride, fl_obs_layout from, uint8_t *dst,
                    size_t dst_stride, fl_obs_layout to, uint32_t width, uint32_t height,
                    int keep_alpha) {
  if (same(from, to)) {
    size_t row = (size_t)width * (size_t)from.bytes;
    if (src_stride == row && dst_stride == row) {
      memcpy(dst, src, row * height);
      return;
    }
    for (uint32_t y = 0; y < height; y++)
      memcpy(dst + y * dst_stride, src + y * src_stride, row);
    return;
  }
  for (uint32_t y = 0; y < height; y++) {
    const uint8_t *s = src + y * src_stride;
    uint8_t *d = dst + y * dst_stride;
    for (uint32_t x = 0; x < width; x++, s += from.bytes, d += to.bytes) {
      d[to.r] = s[from.r];
      d[to.g] = s[from.g];
      d[to.b] = s[from.b];
      if (to.a >= 0 && !keep_alpha)
        d[to.a] = from.a >= 0 ? s[from.a] : 255;
    }
  }
}

/* ---- images over OBS frames ------------------------------------------------------------------ */

static void packed_read(const fl_obs_image *img, uint8_t *dst, fl_obs_layout to) {
  const struct obs_source_frame *f = img->frame;
  fl_obs_layout from = {0, 0, 0, 0, 0};
  fl_obs_frame_layout(f->format, &from);
  fl_obs_convert(f->data[0], f->linesize[0], from, dst, (size_t)f->width * (size_t)to.bytes, to,
                 f->width, f->height, 0);
}

static void packed_write(const fl_obs_image *img, const uint8_t *src, fl_obs_layout from) {
  const struct obs_source_frame *f = img->frame;
  fl_obs_layout to = {0, 0, 0, 0, 0};
  fl_obs_frame_layout(f->format, &to);
  /* A 3-channel model's result keeps the frame's own alpha. */
  fl_obs_convert(src, (size_t)f->width * (size_t)from.bytes, from, f->data[0], f->linesize[0],
                 to, f->width, f->height, from.a < 0);
}

/* Where the Y, U and V bytes of pixel (x, y) are. */
static void yuv_at(const struct obs_source_frame *f, uint32_t x, uint32_t y, uint8_t **py,
                   uint8_t **pu, uint8_t **pv) {
  switch (f->format) {
  case VIDEO_FORMAT_I420:
    *py = f->data[0] + (size_t)y * f->linesize[0] + x;
    *pu = f->data[1] + (size_t)(y / 2) * f->linesize[1] + x / 2;
    *pv = f->data[2] + (size_t)(y / 2) * f->linesize[2] + x / 2;
    break;
  case VIDEO_FORMAT_NV12:
    *py = f->data[0] + (size_t)y * f->linesize[0] + x;
    *pu = f->data[1] + (size_t)(y / 2) * f->linesize[1] + (x / 2) * 2;
    *pv = *pu + 1;
    break;
  default: /* YUY2: Y0 U Y1 V */
    *py = f->data[0] + (size_t)y * f->linesize[0] + (x / 2) * 4 + (x % 2) * 2;
    *pu = f->data[0] + (size_t)y * f->linesize[0] + (x / 2) * 4 + 1;
    *pv = *pu + 2;
    break;
  }
}

static uint8_t to_byte(float v) {
  v = v * 255.0f + 0.5f;
  return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

/* The frame's matrix takes (Y, U, V, 1) in [0, 1] to RGB: rgb[i] = sum_j m[4i + j] * yuv1[j]. */
static void yuv_read(const fl_obs_image *img, uint8_t *dst, fl_obs_layout to) {
  const struct obs_source_frame *f = img->frame;
  const float *m = f->color_matrix;
  for (uint32_t y = 0; y < f->height; y++) {
    uint8_t *d = dst + (size_t)y * f->width * (size_t)to.bytes;
    for (uint32_t x = 0; x < f->width; x++, d += to.bytes) {
      uint8_t *py, *pu, *pv;
      yuv_at(f, x, y, &py, &pu, &pv);
      float Y = *py / 255.0f, U = *pu / 255.0f, V = *pv / 255.0f;
      d[to.r] = to_byte(m[0] * Y + m[1] * U + m[2] * V + m[3]);
      d[to.g] = to_byte(m[4] * Y + m[5] * U + m[6] * V + m[7]);
      d[to.b] = to_byte(m[8] * Y + m[9] * U + m[10] * V + m[11]);
      if (to.a >= 0)
        d[to.a] = 255;
    }
  }
}

static void yuv_write(const fl_obs_image *img, const uint8_t *src, fl_obs_layout from) {
  const struct obs_source_frame *f = img->frame;
  const float *m = f->color_matrix;
  /* The inverse of the matrix's 3x3 part, by cofactors. */
  float a = m[0], b = m[1], c = m[2], d = m[4], e = m[5], g = m[6], h = m[8], i = m[9], k = m[10];
  float det = a * (e * k - g * i) - b * (d * k - g * h) + c * (d * i - e * h);
  if (fabsf(det) < 1e-12f)
    return; /* no matrix: leave the frame as it came */
  float inv[9] = {(e * k - g * i) / det, (c * i - b * k) / det, (b * g - c * e) / det,
                  (g * h - d * k) / det, (a * k - c * h) / det, (c * d - a * g) / det,
                  (d * i - e * h) / det, (b * h - a * i) / det, (a * e - b * d) / det};
  uint32_t sub_y = f->format == VIDEO_FORMAT_YUY2 ? 1 : 2;
  for (uint32_t y0 = 0; y0 < f->height; y0 += sub_y) {
    for (uint32_t x0 = 0; x0 < f->width; x0 += 2) {
      float su = 0, sv = 0;
      int n = 0;
      uint8_t *pu = NULL, *pv = NULL;
      for (uint32_t y = y0; y < y0 + sub_y && y < f->height; y++)
        for (uint32_t x = x0; x < x0 + 2 && x < f->width; x++) {
          const uint8_t *s = src + ((size_t)y * f->width + x) * (size_t)from.bytes;
          float r = s[from.r] / 255.0f - m[3], gg = s[from.g] / 255.0f - m[7],
                bb = s[from.b] / 255.0f - m[11];
          uint8_t *py;
          yuv_at(f, x, y, &py, &pu, &pv);
          *py = to_byte(inv[0] * r + inv[1] * gg + inv[2] * bb);
          su += inv[3] * r + inv[4] * gg + inv[5] * bb;
          sv += inv[6] * r + inv[7] * gg + inv[8] * bb;
          n++;
        }
      *pu = to_byte(su / (float)n);
      *pv = to_byte(sv / (float)n);
    }
  }
}

int fl_obs_image_of_frame(const void *obs_source_frame, fl_obs_image *out) {
  const struct obs_source_frame *f = obs_source_frame;
  fl_obs_layout unused;
  out->width = f->width;
  out->height = f->height;
  out->frame = f;
  if (fl_obs_frame_layout(f->format, &unused)) {
    out->read = packed_read;
    out->write = packed_write;
    return 1;
  }
  if (f->format == VIDEO_FORMAT_I420 || f->format == VIDEO_FORMAT_NV12 ||
      f->format == VIDEO_FORMAT_YUY2) {
    out->read = yuv_read;
    out->write = yuv_write;
    return 1;
  }
  return 0;
}
