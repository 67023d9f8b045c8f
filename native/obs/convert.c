#include "convert.h"

#include <obs.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

static void copy_rows(uint8_t *dst, const uint8_t *src, size_t n) { memcpy(dst, src, n); }

static int same(fl_obs_layout x, fl_obs_layout y) {
  /* Padding (BGRX) against alpha: the model sees the padding byte as alpha and whatever it
   * writes there is padding again, so a BGRX frame travels to a BGRA model unchanged. */
  int xa = x.a < 0 && x.bytes == 4 ? 3 : x.a;
  int ya = y.a < 0 && y.bytes == 4 ? 3 : y.a;
  return x.r == y.r && x.g == y.g && x.b == y.b && x.bytes == y.bytes && xa == ya;
}

/* Copies n bytes with non-temporal stores (FL_OBS_TO_SERVICE), 64 bytes (a cache line) at a
 * time; the ends with memcpy. The caller fences (fl_obs_convert). */
static void copy_to_service(uint8_t *dst, const uint8_t *src, size_t n) {
#if defined(__SSE2__)
  size_t head = (size_t)(-(uintptr_t)dst & 15); /* streaming stores need 16-byte alignment */
  if (head > n)
    head = n;
  memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
    _mm_stream_si128((__m128i *)(dst + i), a);
    _mm_stream_si128((__m128i *)(dst + i + 16), b);
    _mm_stream_si128((__m128i *)(dst + i + 32), c);
    _mm_stream_si128((__m128i *)(dst + i + 48), d);
  }
  memcpy(dst + i, src + i, n - i);
#else
  memcpy(dst, src, n);
#endif
}

void fl_obs_convert(const uint8_t *src, size_t src_stride, fl_obs_layout from, uint8_t *dst,
                    size_t dst_stride, fl_obs_layout to, uint32_t width, uint32_t height,
                    int flags) {
  if (same(from, to)) {
    size_t row = (size_t)width * (size_t)from.bytes;
    void (*copy)(uint8_t *, const uint8_t *, size_t) =
        flags & FL_OBS_TO_SERVICE ? copy_to_service : copy_rows;
    if (src_stride == row && dst_stride == row)
      copy(dst, src, row * height);
    else
      for (uint32_t y = 0; y < height; y++)
        copy(dst + y * dst_stride, src + y * src_stride, row);
#if defined(__SSE2__)
    /* The streaming stores are weakly ordered: they are all done before the caller signals the
     * service's fence (a release store of the fence's value). */
    if (flags & FL_OBS_TO_SERVICE)
      _mm_sfence();
#endif
    return;
  }
  int keep_alpha = flags & FL_OBS_KEEP_ALPHA;
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
                 f->width, f->height, FL_OBS_TO_SERVICE);
}

static void packed_write(const fl_obs_image *img, const uint8_t *src, fl_obs_layout from) {
  const struct obs_source_frame *f = img->frame;
  fl_obs_layout to = {0, 0, 0, 0, 0};
  fl_obs_frame_layout(f->format, &to);
  /* A 3-channel model's result keeps the frame's own alpha. */
  fl_obs_convert(src, (size_t)f->width * (size_t)from.bytes, from, f->data[0], f->linesize[0],
                 to, f->width, f->height, from.a < 0 ? FL_OBS_KEEP_ALPHA : 0);
}

static void packed_release(const fl_obs_image *img) {
  obs_source_release_frame(img->owner, (struct obs_source_frame *)img->frame);
}

int fl_obs_image_of_frame(const void *obs_source_frame, void *source, fl_obs_image *out) {
  const struct obs_source_frame *f = obs_source_frame;
  fl_obs_layout unused;
  out->width = f->width;
  out->height = f->height;
  out->frame = f;
  out->keeps_result = 0;
  out->release = packed_release;
  out->owner = source;
  if (!fl_obs_frame_layout(f->format, &unused))
    return 0;
  out->read = packed_read;
  out->write = packed_write;
  return 1;
}
