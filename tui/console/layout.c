/* Pure layout of the console's panels (see layout.h). */
#include "tui/console/layout.h"

#include <stddef.h>
#include <string.h>

#include "protocol/error.h"

pt_rect pt_rect_of(int y, int x, int h, int w)
{
    pt_rect r = {y, x, h, w};
    return r;
}

void pt_layout_add(pt_layout *l, int id, const char *name, int framed, pt_rect r)
{
    if (l->count < PT_LAYOUT_PANELS_MAX && r.h > 0 && r.w > 0) {
        l->id[l->count] = id;
        l->name[l->count] = name;
        l->framed[l->count] = (unsigned char)(framed != 0);
        l->rect[l->count] = r;
        l->count++;
    }
}

int pt_layout_frame(int rows, int cols, pt_layout *out, pt_rect *body)
{
    if (!out || !body)
        return PT_EINVAL;
    memset(out, 0, sizeof *out);
    out->rows = rows;
    out->cols = cols;
    *body = pt_rect_of(1, 0, rows - 2, cols);
    if (rows < PT_LAYOUT_MIN_ROWS || cols < PT_LAYOUT_MIN_COLS) {
        if (rows >= 2 && cols >= 1) {
            pt_layout_add(out, PT_PANEL_HEADER, "header", 0, pt_rect_of(0, 0, 1, cols));
            pt_layout_add(out, PT_PANEL_STATUS, "status", 0, pt_rect_of(rows - 1, 0, 1, cols));
        }
        return PT_ERANGE;
    }
    pt_layout_add(out, PT_PANEL_HEADER, "header", 0, pt_rect_of(0, 0, 1, cols));
    pt_layout_add(out, PT_PANEL_STATUS, "status", 0, pt_rect_of(rows - 1, 0, 1, cols));
    return 0;
}

const pt_rect *pt_layout_find(const pt_layout *layout, int id)
{
    if (!layout)
        return NULL;
    for (int i = 0; i < layout->count; i++)
        if (layout->id[i] == id)
            return &layout->rect[i];
    return NULL;
}

const pt_rect *pt_layout_find_name(const pt_layout *layout, const char *name)
{
    if (!layout || !name)
        return NULL;
    for (int i = 0; i < layout->count; i++)
        if (layout->name[i] && !strcmp(layout->name[i], name))
            return &layout->rect[i];
    return NULL;
}

int pt_rect_contains(const pt_rect *r, int y, int x)
{
    return y >= r->y && y < r->y + r->h && x >= r->x && x < r->x + r->w;
}

int pt_rect_overlap(const pt_rect *a, const pt_rect *b)
{
    return a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h && b->y < a->y + a->h;
}
