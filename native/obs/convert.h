/* Pixels between OBS's packed frame formats and a model's packed uint8 layout (docs/obs.md). */
#ifndef FENCELINE_OBS_CONVERT_H
#define FENCELINE_OBS_CONVERT_H

#include <stddef.h>
#include <stdint.h>

/* Where each colour sits in one pixel: byte offsets of red, green, blue and alpha (alpha -1:
 * none, or padding that nobody reads), and the bytes per pixel. */
typedef struct fl_obs_layout {
  int r, g, b, a;
  int bytes;
} fl_obs_layout;

/* The layout of an OBS video_format (RGBA, BGRA, BGRX, BGR3); 0 for one the filter does not
 * take. */
int fl_obs_frame_layout(int obs_video_format, fl_obs_layout *out);

/* A model's layout: `order` "rgba" or "bgra", `channels` 4 or 3. */
fl_obs_layout fl_obs_model_layout(int bgr, int channels);

/* fl_obs_convert's flags. */
enum {
  /* dst's alpha bytes are left as they are (the frame's own alpha under a 3-channel model's
   * colours) */
  FL_OBS_KEEP_ALPHA = 1,
  /* dst is a slot the service reads next, from another process and core: where rows are copied
   * whole, the stores bypass this core's caches (non-temporal), which neither reads dst again nor
   * gains from keeping it cached, and which saves reading each line of dst in first */
  FL_OBS_TO_SERVICE = 2
};

/* Copies height rows of width pixels from src (rows src_stride bytes apart, layout from) into
 * dst (layout to): rows are copied whole where the layouts are equal, else pixel by pixel.
 * Channels the source lacks: alpha becomes 255. flags: FL_OBS_* above. */
void fl_obs_convert(const uint8_t *src, size_t src_stride, fl_obs_layout from, uint8_t *dst,
                    size_t dst_stride, fl_obs_layout to, uint32_t width, uint32_t height,
                    int flags);

/* One frame as the runner sees it: its size, and how to read it into (write it from) packed
 * pixels of a model's layout, rows width * layout.bytes apart. */
typedef struct fl_obs_image fl_obs_image;
struct fl_obs_image {
  uint32_t width, height;
  void (*read)(const fl_obs_image *img, uint8_t *dst, fl_obs_layout to);
  void (*write)(const fl_obs_image *img, const uint8_t *src, fl_obs_layout from);
  const void *frame; /* the struct obs_source_frame */
  /* The image keeps what was last written to it (a texture, not a new frame each time): the
   * runner writes a result once, not again each frame it is shown. */
  int keeps_result;
  /* An async source's frame, which the runner may keep past the call and hands back with
   * release (owner: the source it came from); NULL for an image that lives only in the call. */
  void (*release)(const fl_obs_image *img);
  void *owner;
};

/* An image over an OBS frame in a packed format (fl_obs_frame_layout); 0 for any other format
 * (YUV: the filter takes those frames on the GPU, after OBS's own conversion: render.c). The
 * runner may keep it (release hands it back to `source`, the async source it came from). */
int fl_obs_image_of_frame(const void *obs_source_frame, void *source, fl_obs_image *out);

#endif
