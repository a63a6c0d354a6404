/* cpm_unknown_type.c: not compiled; coverse-cpm must refuse it, naming the type it does not
 * know (widget has no CpmDeclareSimple or CpmDeclarePointer) and the function. */
typedef struct {
    int x;
} widget;

CpmInvokable paint(int times, widget w) {}
