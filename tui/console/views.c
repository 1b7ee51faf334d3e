/* The console's views: the table (see view.h). */
#include "tui/console/view.h"

#include <string.h>

/* One line per built-in view, in tab order; each is a `const pt_view_class
 * pt_view_<name>` in tui/console/view_<name>.c. */
#define PT_VIEW_LIST(X) X(plan) X(timeline) X(stats) X(agents) X(help)

#define PT_VIEW_EXTERN_(name) extern const pt_view_class pt_view_##name;
PT_VIEW_LIST(PT_VIEW_EXTERN_)
#undef PT_VIEW_EXTERN_

#define PT_VIEW_ENTRY_(name) &pt_view_##name,
static const pt_view_class *views[PT_VIEWS_MAX] = {PT_VIEW_LIST(PT_VIEW_ENTRY_)};
#undef PT_VIEW_ENTRY_

static int count_views(void)
{
    int n = 0;
    while (n < PT_VIEWS_MAX && views[n])
        n++;
    return n;
}

int pt_view_count(void)
{
    return count_views();
}

const pt_view_class *pt_view_at(int i)
{
    return i >= 0 && i < count_views() ? views[i] : NULL;
}

int pt_view_find(const char *name)
{
    for (int i = 0; name && i < count_views(); i++)
        if (!strcmp(views[i]->name, name))
            return i;
    return -1;
}

int pt_view_by_hotkey(int ch)
{
    for (int i = 0; ch > 0 && ch < 128 && i < count_views(); i++)
        if (views[i]->hotkeys && strchr(views[i]->hotkeys, ch))
            return i;
    return -1;
}

int pt_view_register(const pt_view_class *cls, pt_error *err)
{
    if (!cls || !cls->name || !cls->name[0] || !cls->draw || !cls->hotkeys || !cls->hotkeys[0] ||
        strlen(cls->hotkeys) > PT_VIEW_HOTKEYS_MAX)
        return pt_error_set(err, PT_EINVAL,
                            "view: a view needs a name, a draw function and 1 to %d hot keys",
                            PT_VIEW_HOTKEYS_MAX);
    if (pt_view_find(cls->name) >= 0)
        return pt_error_set(err, PT_EINVAL, "view \"%s\": the name is taken", cls->name);
    for (const char *k = cls->hotkeys; *k; k++)
        if (pt_view_by_hotkey(*k) >= 0)
            return pt_error_set(err, PT_EINVAL, "view \"%s\": hot key '%c' is the %s view's",
                                cls->name, *k, views[pt_view_by_hotkey(*k)]->name);
    int n = count_views();
    if (n == PT_VIEWS_MAX)
        return pt_error_set(err, PT_ERANGE, "view \"%s\": at most %d views", cls->name,
                            PT_VIEWS_MAX);
    views[n] = cls;
    return 0;
}

int pt_view_layout(int i, const pt_ui *ui, const void *state, int rows, int cols, pt_layout *out)
{
    const pt_view_class *cls = pt_view_at(i);
    pt_rect body;
    int rc = pt_layout_frame(rows, cols, out, &body);
    if (rc < 0 || !cls)
        return rc < 0 ? rc : PT_EINVAL;
    if (cls->layout)
        cls->layout(ui, state, body, out);
    else
        pt_layout_add(out, 0, cls->name, 1, body);
    return 0;
}

int pt_view_keys_run(const pt_view_key *keys, pt_ui *ui, void *state, int ch, int readonly,
                     const pt_view_key **refused)
{
    for (const pt_view_key *k = keys; k && k->label; k++)
        for (int c = 0; c < PT_VIEW_KEY_CODES && k->codes[c]; c++) {
            if (k->codes[c] != ch || !k->run)
                continue;
            if (readonly && k->edits) {
                if (refused)
                    *refused = k;
                return 1;
            }
            k->run(ui, state, ch);
            return 1;
        }
    return 0;
}
